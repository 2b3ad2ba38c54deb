"""Outside audit 25c (money figures against the ledger): every figure afc prints of what was
spent agrees with the attempts table, through the real ``afc`` command (the providers' fakes
in tests/fakeproviders.py)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3

from conftest import jobs, manifest, wait_for

REPLICATE = "black-forest-labs/flux-schnell"


def test_a_cancelled_jobs_paid_call_left_by_a_killed_run_counts_as_failed_spend(afc, fake):
    """A Replicate render answered (3.2 s, priced 0.023200 and written on its attempt at once,
    README "Budget") while its output could not be downloaded yet; the job was cancelled and
    the run killed before the download: the attempt stays ``started`` with its known cost, of
    a job that has ended, which afc counts as an attempt of unknown outcome
    (``LEFT_STARTED_SQL``). ``afc costs report`` counted it in ``unknown_attempts`` but left
    its cost out of ``failed_spend`` ("known cost of failed and unknown-outcome attempts"),
    where the same attempt marked ``unknown`` is counted: the report said 0.000000 was
    wasted of a 0.023200 call that produced nothing."""
    data = manifest(
        [
            {
                "key": "a",
                "prompt": "cdn-held sunrise",
                "chain": [{"provider": "replicate", "model": REPLICATE, "attempts": 1}],
            }
        ]
    )
    data["rates"] = [{"provider": "replicate", "model": REPLICATE, "per_second": "0.00725"}]
    afc.write_manifest(data)
    run = afc.popen("submit", "manifest.yaml")
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE cost_micros IS NOT NULL", 1)
        os.kill(run.pid, signal.SIGSTOP)  # its output still out of reach: the call not ended
        cancelled = afc("cancel", "a", "--batch", "b1", "--yes")
        assert cancelled.returncode == 0, cancelled.stderr
    finally:
        os.kill(run.pid, signal.SIGKILL)
        run.wait()
    assert afc.rows("SELECT j.status, a.status, a.cost_micros FROM attempts a JOIN jobs j") == [
        ("cancelled", "started", 23200)
    ]
    total = afc.json("costs", "report")["total"]
    assert total["priced"] == "0.023200"
    assert total["unknown_attempts"] == 1
    assert total["failed_spend"] == "0.023200", total
    # as the same attempt once marked unknown is counted
    with sqlite3.connect(afc.cwd / "afc.db") as conn:
        conn.execute("UPDATE attempts SET status = 'unknown'")
    assert afc.json("costs", "report")["total"] == total


def test_the_costs_report_of_a_moved_ledger_says_where_its_spend_went(afc):
    """'afc ledger copy' moves a ledger's work: its jobs run on the destination from then on,
    and the copy holds the history too. 'afc status' and 'afc queue stats' of the old ledger
    say so; 'afc costs report' (a cron's daily spend mail, an alert's figure) printed the old
    figures alone, which stop growing at the move, with no word that the spend goes on
    elsewhere, nor that the new ledger's report counts the same attempts again. It now says
    where the ledger went, on stderr; its figures (stdout, --json) are unchanged."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    assert afc("submit", "manifest.yaml").returncode == 0
    copied = afc("ledger", "copy", "afc.db", "sqlite:///back.db")
    assert copied.returncode == 0, copied.stderr
    old = afc("costs", "report", "--json")
    assert old.returncode == 0, old.stderr
    assert "moved to" in old.stderr and "back.db" in old.stderr, old.stderr
    new = afc("costs", "report", "--json", "--ledger", "back.db")
    assert new.returncode == 0 and "moved" not in new.stderr, new.stderr
    # the same figures; the old ledger's --json names where its work went (outside audit 30c)
    moved = json.loads(old.stdout)
    assert "back.db" in moved.pop("moved_to")
    assert moved == json.loads(new.stdout)
    assert '"priced": "0.050000"' in new.stdout


def test_a_budget_that_fits_a_batch_exactly_runs_it_whole_with_a_price_of_many_decimals(afc, fake):
    """fal at 0.0333333 an image (a third of a dime, as a card may say), three images a
    request: each request is estimated, and charged, 0.100000 (0.0999999 rounded half-up to
    the micro-USD), and ten fit a budget of 1.00 exactly, as 'afc plan' says. Once an answer
    came, the run reserved the model's 'dearest cost per image asked for' rounded up to a
    whole micro-USD, 0.033334, times three: 0.100002 for every later request, though no
    answer had cost more than its estimate. The tenth job was refused by the budget ('the
    next attempt is estimated at 0.100002') and the run exited 4 with 0.100000 of its budget
    unspent. The dearest cost is now kept exact (a fraction of a micro-USD per image), so a
    reservation is never above what an answer has cost for the same images."""
    model = "fal-ai/flux/dev"
    data = manifest(
        [
            {"key": f"shot-{i}", "prompt": f"frame {i}", "params": {"num_images": 3}}
            for i in range(10)
        ]
    )
    data["defaults"]["chain"] = [{"provider": "fal", "model": model, "attempts": 1}]
    data["rates"] = [{"provider": "fal", "model": model, "per_image": "0.0333333"}]
    data["budget"] = "1.00"
    afc.write_manifest(data)
    plan = afc.json("plan", "manifest.yaml")
    assert (plan["estimated_spend"], plan["fits_budget"]) == ("1.000000", True)
    result = afc("submit", "manifest.yaml", "--concurrency", "1", "--json")
    assert result.returncode == 0, result.stderr
    assert afc.rows("SELECT COUNT(*), SUM(cost_micros), MAX(reserved_micros) FROM attempts") == [
        (10, 1_000_000, 100_000)
    ]
    assert afc.json("costs", "report")["total"]["priced"] == "1.000000"


def test_a_models_dearer_answers_in_one_batch_do_not_raise_another_batchs_estimates(afc):
    """Two batches of one model whose cards differ (the provider cut its price between the
    manifests: 0.10 an image in the older batch, 0.01 in the newer), resumed together under
    one budget that fits both. Once the older batch's answer came (0.10, its card's price),
    the run reserved 0.10 for every later attempt of the model, the newer batch's too,
    whose card says and charges 0.01: its jobs were refused by the budget ('the next attempt
    is estimated at 0.100000') and the run exited 4 with most of the budget unspent. What a
    model's answers have cost is learned per rate card now: the card that priced them."""
    old = manifest(jobs(1), batch="a-old")
    old["rates"] = [{"provider": "local", "model": "m1", "per_image": "0.10"}]
    afc.write_manifest(old, "old.yaml")
    new = manifest(jobs(5), batch="b-new")
    new["rates"] = [{"provider": "local", "model": "m1", "per_image": "0.01"}]
    afc.write_manifest(new, "new.yaml")
    for name in ("old.yaml", "new.yaml"):
        assert afc("submit", name, "--no-run").returncode == 0
    result = afc("resume", "--max-spend", "0.15", "--concurrency", "1")
    assert result.returncode == 0, result.stderr
    assert "this run spent 0.150000 USD" in result.stderr, result.stderr
    assert afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("succeeded", 6)]
