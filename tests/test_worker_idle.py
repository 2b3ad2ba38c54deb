"""An idle ``afc worker`` (no job to claim) starts a run loop only to drain deliveries that are
due: a delivery waiting out its backoff costs an idle worker nothing at each poll."""

from __future__ import annotations

import base64
import sqlite3
import time

from conftest import jobs, manifest

from afc_cli import run as run_mod
from afc_cli.worker import work

SECRET = "whsec_" + base64.b64encode(b"afc test secret, 32 bytes long!!").decode()


def test_an_idle_worker_drains_only_due_deliveries(afc, monkeypatch):
    afc.env["AFC_HOOK_SECRET"] = SECRET
    monkeypatch.setenv("AFC_HOOK_SECRET", SECRET)
    data = manifest(jobs(1))
    data["webhook"] = {"url": "http://127.0.0.1:9/down", "secret_env": "AFC_HOOK_SECRET"}
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    # the receiver was down: its delivery waits out a backoff (an hour here: full jitter
    # may draw a backoff short enough to be due by the time the worker looks)
    assert afc.rows("SELECT status, attempts FROM deliveries") == [("pending", 1)]
    with sqlite3.connect(afc.cwd / "afc.db") as conn:
        conn.execute("UPDATE deliveries SET next_attempt_at = ?", (time.time() + 3600,))

    loops: list[list[str]] = []
    real = run_mod.run_jobs

    def counted(ledger, job_ids, **kwargs):
        loops.append(list(job_ids))
        return real(ledger, job_ids, **kwargs)

    monkeypatch.setattr(run_mod, "run_jobs", counted)
    monkeypatch.chdir(afc.cwd)

    def idle_worker() -> None:
        result = work(
            ledger_path=str(afc.cwd / "afc.db"), concurrency=1, grace_s=0, until_idle=True
        )
        assert result.exit_code == 0

    idle_worker()
    assert loops == [], "nothing was due: no run loop"
    assert afc.rows("SELECT attempts FROM deliveries") == [(1,)]

    with sqlite3.connect(afc.cwd / "afc.db") as conn:  # now it is due
        conn.execute("UPDATE deliveries SET next_attempt_at = 0")
    idle_worker()
    assert loops == [[]], "a due delivery: one drain"
    assert afc.rows("SELECT attempts FROM deliveries") == [(2,)]


def test_a_worker_reports_its_own_spend_and_the_shared_budget_apart(afc):
    """Workers of one budget share its run id: a second worker that started no attempt
    reported the first one's 0.10 as its own ``spent`` (summing cron's log lines counted it
    twice). ``spent`` is this worker's; the budget's figures are under ``budget``."""
    afc.write_manifest(manifest(jobs(2)))  # 0.05 USD a render
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    first = afc.json("worker", "--until-idle", "--max-spend", "0.10")
    assert (first["spent"], first["budget"]["priced"]) == ("0.100000", "0.100000")
    afc.write_manifest(manifest(jobs(2), batch="b2"), "m2.yaml")
    assert afc("submit", "m2.yaml", "--no-run").returncode == 0
    second = afc.json("worker", "--until-idle", "--max-spend", "0.10", expect=4)
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(2,)]  # the first worker's
    assert (second["spent"], second["unknown_cost_attempts"]) == ("0.000000", 0)
    assert second["budget"]["priced"] == "0.100000"
    line = afc("worker", "--until-idle", "--max-spend", "0.10").stderr
    assert "spent 0.000000 USD (priced)" in line, line
    assert "budget 'workers': 0.100000 of 0.100000 USD priced" in line, line
    # the jobs left waiting say whose spend stopped them: the budget's workers', not "this run"
    reasons = {r for (r,) in afc.rows("SELECT waiting_reason FROM jobs WHERE batch = 'b2'")}
    assert reasons == {
        "budget: the workers of budget workers have spent or reserved 0.100000 of 0.100000 "
        "USD; the next attempt is estimated at 0.050000"
    }, reasons
