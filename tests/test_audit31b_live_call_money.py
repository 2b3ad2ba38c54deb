"""Outside audit 31b (money as reported): a person cancels a job while a live run's call of it
is in flight. The call goes on and that run records its answer and cost (README: "A live run's
call is left to that run"); 'afc show' lists it ``started`` (audit 30h). Every figure of what
was spent meanwhile counted the same call as an attempt of unknown outcome and cost: 'afc
show --json' and 'afc status --json' said one unpriced attempt, and 'afc costs report' one
unpriced attempt of unknown outcome, for a call whose cost its run was about to record
(``LEFT_STARTED_SQL`` and ``JOB_COST_SQL`` keyed on the job having ended alone, not on the
run's lease, as 'afc show' and a takeover do)."""

from __future__ import annotations

import sqlite3
import time

import pytest
from conftest import manifest


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_a_live_runs_call_of_a_cancelled_job_is_in_flight_in_every_figure(afc, engine, request):
    ledger = ["--ledger", request.getfixturevalue("pg_url")] if engine == "postgresql" else []
    log, release = afc.cwd / "calls.log", afc.cwd / "release"
    env = {"AFC_LOCAL_CALL_LOG": str(log), "AFC_LOCAL_RELEASE": str(release)}
    afc.write_manifest(manifest([{"key": "shot-1", "prompt": "a lighthouse"}]))
    run = afc.popen("submit", "manifest.yaml", *ledger, env=env)
    try:
        deadline = time.time() + 30
        while not (log.exists() and log.read_text().strip()):
            assert time.time() < deadline and run.poll() is None, run.stderr.read()
            time.sleep(0.05)
        assert afc("cancel", "shot-1", *ledger).returncode == 0
        story = afc.json("show", "shot-1", *ledger)
        [attempt] = story["attempts"]
        assert attempt["status"] == "started", attempt  # audit 30h: a call in flight
        # ... and so in every figure: no cost yet, known or unknown
        assert story["job"]["unpriced_attempts"] == 0, story["job"]
        [row] = afc.json("status", "--batch", "b1", *ledger)["jobs"]
        assert row["unpriced_attempts"] == 0, row
        total = afc.json("costs", "report", *ledger)["total"]
        assert (total["unpriced_attempts"], total["unknown_attempts"]) == (0, 0), total
        release.touch()
        run.wait(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    # the run recorded its answer and cost: counted once, priced
    story = afc.json("show", "shot-1", *ledger)
    assert story["job"]["unpriced_attempts"] == 0 and story["job"]["cost"] == "0.050000"
    total = afc.json("costs", "report", *ledger)["total"]
    assert (total["priced"], total["unpriced_attempts"], total["unknown_attempts"]) == (
        "0.050000",
        0,
        0,
    ), total
    [row] = afc.json("status", "--batch", "b1", *ledger)["jobs"]
    assert row["unpriced_attempts"] == 0 and row["cost"] == "0.050000", row


def test_a_call_left_started_by_a_gone_run_on_an_ended_job_counts_once_in_every_figure(afc):
    """The other side of the same rule: an attempt left ``started`` on a job that has ended,
    by a run that is gone (here: no lease, an owner no process of this host has), is of
    unknown outcome and unpriced in every figure, 'afc outputs' among them."""
    afc.write_manifest(manifest([{"key": "shot-1", "prompt": "a lighthouse"}]))
    assert afc("submit", "manifest.yaml").returncode == 0
    with sqlite3.connect(afc.cwd / "afc.db") as conn:  # a late call of a run long gone
        conn.execute(
            "INSERT INTO attempts (job_id, number, chain_index, provider, model, status,"
            " owner, started_at) SELECT job_id, 2, 0, provider, model, 'started',"
            " 'gone-host:1:1', started_at FROM attempts"
        )
    story = afc.json("show", "shot-1")
    assert [a["status"] for a in story["attempts"]] == ["succeeded", "unknown"]
    assert (story["job"]["cost"], story["job"]["unpriced_attempts"]) == ("0.050000", 1)
    [row] = afc.json("status", "--batch", "b1")["jobs"]
    assert (row["cost"], row["unpriced_attempts"]) == ("0.050000", 1), row
    [output] = afc.json("outputs")["outputs"]
    assert (output["cost"], output["unpriced_attempts"]) == ("0.050000", 1), output
    total = afc.json("costs", "report")["total"]
    assert (total["priced"], total["unpriced_attempts"], total["unknown_attempts"]) == (
        "0.050000",
        1,
        1,
    ), total
