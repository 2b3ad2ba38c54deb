"""Audit 64c: one paid failure of a model was learnt as the price of its every render.

A budget reserves a model's ``per_image`` estimate, raised to the dearest cost per image of
its answers under the card (``pipeline.dearest_known`` from the ledger, ``_learn_cost`` from
the run's own): a token card's images cost more than its ``per_image`` (audit 45a). But a
failure was learnt as such an answer too. A Replicate model billed by compute time, card
``{per_image: 0.01, per_second: 0.0023}``, whose one prediction ran into Replicate's own
30-minute limit (billed 1800 s: 4.14 USD, recorded so) made every later reservation of the
model 4.14 USD, 414 times what its renders cost: ``afc plan`` estimated ten new jobs at
41.40 USD and said they did not fit 1.00, and ``afc submit --max-spend 1.00`` started
nothing and exited 4 having spent 0 (under 10.00: two calls in flight at most, and the
run stops with 4.14 USD of its cap unspent, 414 renders). A failure made no image: what it cost says nothing of what a render
costs (it still counts, at its cost, in every budget and report). Only answers that made
images are learnt from; a blocked render that was made and billed (fal's safety checker)
still is."""

from __future__ import annotations

from conftest import manifest

MODEL = "owner/sdxl"
CARD = {"provider": "replicate", "model": MODEL, "per_image": "0.01", "per_second": "0.0023"}


def write(afc, jobs) -> None:
    data = manifest(jobs, rates=[CARD])
    data["defaults"]["chain"] = [{"provider": "replicate", "model": MODEL, "attempts": 1}]
    afc.write_manifest(data)


def test_a_timed_out_prediction_is_not_the_price_of_the_next_renders(afc, fake):
    afc.env["AFC_POLL_S"] = "0.02"
    timed_out = [{"key": "t0", "prompt": "replicate-timeout t0"}]
    write(afc, timed_out)
    first = afc("submit", "manifest.yaml")
    assert first.returncode == 1, first.stderr  # the job failed, billed its 1800 s
    assert afc.rows("SELECT status, cost_micros FROM attempts") == [("failed", 4_140_000)]

    write(afc, timed_out + [{"key": f"s{i}", "prompt": f"plain s{i}"} for i in range(10)])
    plan = afc.json("plan", "manifest.yaml", "--max-spend", "1.00")
    assert plan["estimated_spend"] == "0.100000", plan["estimated_spend"]  # was 41.400000
    assert plan["fits_budget"] is True
    run = afc("submit", "manifest.yaml", "--max-spend", "1.00", "--concurrency", "4")
    assert run.returncode == 1, run.stderr  # t0 stays failed; was 4, nothing started
    assert fake.counts["replicate_submit"] == 11
    assert afc.rows(
        "SELECT COUNT(*), SUM(cost_micros) FROM attempts WHERE status = 'succeeded'"
    ) == [(10, 100_000)]
