"""Audit 17, money: what an attempt records that it cost, and what a budget lets start, through
the real ``afc`` command (the local provider, and the fake providers of tests/fakeproviders.py)."""

from __future__ import annotations

import signal

from conftest import manifest, wait_for


def test_a_workers_loop_prices_a_job_by_the_cards_it_was_admitted_with(afc):
    """A long-running worker's loop read the batches' rate cards once, as it began, and jobs
    its later claims fed into it (``Refill``) ran by those. A submit that added a job of a new
    model with that model's card, while the loop ran, passed the claim's budget check (which
    read the cards afresh), then ran in the old loop without the card: under ``--max-spend``
    the attempt reserved nothing, and its cost was recorded unpriced although the batch has a
    card for it. A claim of a batch whose cards changed since the loop began now ends the
    feeding, as one of a batch admitted since does: the next round reads the cards afresh."""
    chain = {"provider": "local", "model": "m1", "attempts": 1}
    first = manifest([{"key": "j1", "prompt": "p1"}, {"key": "j2", "prompt": "p2"}])
    first["defaults"]["chain"] = [chain]
    afc.write_manifest(first, "m1.yaml")
    assert afc("submit", "m1.yaml", "--no-run").returncode == 0
    release = afc.cwd / "release"
    worker = afc.popen(
        "worker",
        "--until-idle",
        "--claim",
        "1",
        "--concurrency",
        "1",
        "--max-spend",
        "1.00",
        "--json",
        env={"AFC_LOCAL_RELEASE": str(release)},
    )
    wait_for(afc, "SELECT COUNT(*) FROM attempts", 1)  # j1's call, held; j2 claimed beside it
    second = manifest(
        [
            {"key": "j1", "prompt": "p1"},
            {"key": "j2", "prompt": "p2"},
            {
                "key": "j3",
                "prompt": "p3",
                "chain": [{"provider": "local", "model": "m2", "attempts": 1}],
            },
        ],
        rates=[
            {"provider": "local", "model": "m1", "per_image": "0.05"},
            {"provider": "local", "model": "m2", "per_image": "0.07"},
        ],
    )
    second["defaults"]["chain"] = [chain]
    afc.write_manifest(second, "m2.yaml")
    assert afc("submit", "m2.yaml", "--no-run").returncode == 0
    release.write_text("go")
    assert worker.wait(timeout=60) == 0, worker.stderr.read()
    rows = afc.rows(
        "SELECT a.cost_micros, a.cost_source, a.reserved_micros FROM attempts a"
        " JOIN jobs j ON j.id = a.job_id WHERE j.key = 'j3'"
    )
    assert rows == [(70_000, "local", 70_000)], rows
    status = {j["key"]: j["cost"] for j in afc.json("status", "--all")["jobs"]}
    assert status == {"j1": "0.050000", "j2": "0.050000", "j3": "0.070000"}


def test_a_workers_later_rounds_reserve_what_a_models_answers_have_cost(afc, fake):
    """Once a model's answer cost more than its estimate (here a fal model that makes and bills
    one image more than asked: 0.10 against 0.05), a run reserves that cost for the model's
    later attempts (README "Budget"). A worker began every round (a loop per claim that
    found work after the last ended) knowing nothing, so the next round's first call
    reserved 0.05 with 0.10 spent of a 0.16 cap, started, and took the budget to 0.20. The
    worker keeps what its rounds learned: that call does not start, and the worker stops by
    the budget (exit 4) with 0.10 spent."""
    chain = [{"provider": "fal", "model": "fal-ai/flux/dev", "attempts": 1}]
    rates = [{"provider": "fal", "model": "fal-ai/flux/dev", "per_image": "0.05"}]
    first = manifest([{"key": "a", "prompt": "hold extra-image a"}], rates=rates)
    first["defaults"]["chain"] = chain
    afc.write_manifest(first, "m1.yaml")
    assert afc("submit", "m1.yaml", "--no-run").returncode == 0
    worker = afc.popen(
        "worker", "--until-idle", "--concurrency", "1", "--max-spend", "0.16", "--json"
    )
    wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE provider_request_id IS NOT NULL", 1)
    # admitted while the first round's only job renders: the next round claims them
    second = manifest(
        [{"key": f"b{i}", "prompt": f"extra-image b{i}"} for i in range(2)],
        rates=rates,
        batch="b2",
    )
    second["defaults"]["chain"] = chain
    afc.write_manifest(second, "m2.yaml")
    assert afc("submit", "m2.yaml", "--no-run").returncode == 0
    fake.released.set()
    assert worker.wait(timeout=60) == 4, worker.stderr.read()
    costs = afc.rows("SELECT cost_micros FROM attempts ORDER BY id")
    assert costs == [(100_000,)], costs
    assert afc.json("costs", "report")["total"]["priced"] == "0.100000"


def test_a_render_spooled_before_a_crash_keeps_the_cost_its_budget_recorded(afc):
    """Under a budget a run records an answer's cost the moment it is read (the budget counts
    it instead of the estimate from then on), before the spool checkpoint writes the
    attempt's end. It kept the figure in the attempt's reservation alone: a SIGKILL between
    the spool file and its checkpoint left the attempt, adopted from the spool by the next
    run, unpriced (``afc costs report``: 0.000000 priced, 2 unpriced) although the ledger held
    what it cost. The cost is the attempt's now, and the adopted attempt keeps it."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "a"}, {"key": "b", "prompt": "b"}]))
    died = afc(
        "submit", "manifest.yaml", "--max-spend", "1", env={"AFC_CRASH_POINT": "after_spool"}
    )
    assert died.returncode == -signal.SIGKILL, died.stderr
    assert afc("resume").returncode == 0
    rows = afc.rows("SELECT status, cost_micros, cost_source FROM attempts ORDER BY id")
    assert rows == [("succeeded", 50_000, "local")] * 2, rows
    total = afc.json("costs", "report")["total"]
    assert (total["priced"], total["unpriced_attempts"]) == ("0.100000", 0), total


def test_a_call_whose_process_died_counts_as_unknown_before_any_run_takes_it_over(afc):
    """A call left ``started`` by a process that died is marked unknown (possibly paid) by
    the run that takes its job over. Until one did, ``afc costs report`` counted it nowhere:
    after a SIGKILL mid-call it said no attempt was unpriced or of unknown outcome (a batch
    given up after a crash kept saying so). It counts it now, as that run will mark it; a
    call of a live run is still in flight and counted neither way."""
    release = afc.cwd / "release"
    afc.write_manifest(manifest([{"key": "a", "prompt": "a"}]))
    live = afc.popen("submit", "manifest.yaml", env={"AFC_LOCAL_RELEASE": str(release)})
    wait_for(afc, "SELECT COUNT(*) FROM attempts", 1)
    total = afc.json("costs", "report")["total"]
    assert (total["unknown_attempts"], total["unpriced_attempts"]) == (0, 0), total
    release.write_text("go")
    assert live.wait(timeout=60) == 0, live.stderr.read()

    afc.write_manifest(manifest([{"key": "b", "prompt": "b"}], batch="b2"), "m2.yaml")
    died = afc("submit", "m2.yaml", env={"AFC_CRASH_POINT": "after_attempt_row"})
    assert died.returncode == -signal.SIGKILL, died.stderr
    report = afc.json("costs", "report", "--by", "batch")
    rows = {row["batch"]: row for row in report["rows"]}
    assert (rows["b2"]["unknown_attempts"], rows["b2"]["unpriced_attempts"]) == (1, 1), rows
    assert (rows["b1"]["unknown_attempts"], rows["b1"]["priced"]) == (0, "0.050000"), rows
    assert "1 attempt has an unknown outcome" in afc("costs", "report").stderr
    # the run that takes the job over marks it unknown: the same figures
    assert afc("resume").returncode == 0
    rows = {row["batch"]: row for row in afc.json("costs", "report", "--by", "batch")["rows"]}
    assert (rows["b2"]["unknown_attempts"], rows["b2"]["unpriced_attempts"]) == (1, 1), rows
