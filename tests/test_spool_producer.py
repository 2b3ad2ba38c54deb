"""Which attempt made a spool file that a later run adopts (``pipeline._spool_producer``).

Found by ``bench/chaos.py --postgres`` (seed 59): a worker host frozen mid-call past its lease
woke to its answer and kept the paid render in its spool as its ledger connection was lost;
meanwhile a process that had taken the job over started an attempt it never sent (it was
stopping). The next run on the first host adopted the spool file for that later, failed
attempt: the job succeeded 'rendered' by no attempt, and the attempt that paid stayed
``unknown``, its cost unknown. The file's producer is the attempt its ``.about`` record names,
else the last one that may have rendered, never a later one that failed."""

from __future__ import annotations

import json
import signal
import sqlite3

from conftest import manifest

NEVER_SENT = "never sent: afc was stopping"


def crashed_after_spool(afc) -> None:
    """One job rendered by 'local' and spooled, its process SIGKILLed before the spool's
    checkpoint; then a second attempt another process started and never sent, as a process
    that took the job over and was stopping leaves it."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "a"}]))
    died = afc("submit", "manifest.yaml", env={"AFC_CRASH_POINT": "after_spool"})
    assert died.returncode == -signal.SIGKILL, died.stderr
    conn = sqlite3.connect(afc.cwd / "afc.db")
    try:
        with conn:
            conn.execute(
                "INSERT INTO attempts (job_id, run_id, number, chain_index, provider, model, status,"
                " error_class, error_message, cost_micros, cost_source, owner, started_at,"
                " ended_at) SELECT job_id, run_id, 2, chain_index, provider, model, 'failed', 'interrupted',"
                " ?, 0, 'unsent', 'elsewhere:1:1', started_at + 1, started_at + 1"
                " FROM attempts WHERE number = 1",
                (NEVER_SENT,),
            )
            conn.execute("UPDATE attempts SET status = 'unknown' WHERE number = 1")
            conn.execute("UPDATE jobs SET attempts = 2")
    finally:
        conn.close()


def test_a_spool_file_is_adopted_for_the_attempt_that_made_it(afc):
    crashed_after_spool(afc)
    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert afc.rows("SELECT number, status, cost_micros FROM attempts ORDER BY number") == [
        (1, "succeeded", 50_000),
        (2, "failed", 0),
    ]
    [(detail,)] = afc.rows(
        "SELECT detail_json FROM steps WHERE step = 'render' AND detail_json LIKE '%adopted%'"
    )
    assert json.loads(detail)["attempt"] == 1
    total = afc.json("costs", "report")["total"]
    assert (total["priced"], total["unknown_attempts"]) == ("0.050000", 0), total


def test_the_cost_an_about_record_kept_is_the_adopted_attempts(afc):
    """A run whose ledger broke kept the render's cost in the file's ``.about`` record; the
    ledger never had it. The adopting run records it on the attempt that paid."""
    crashed_after_spool(afc)
    [(job_id,)] = afc.rows("SELECT id FROM jobs")
    conn = sqlite3.connect(afc.cwd / "afc.db")
    try:
        with conn:
            conn.execute(
                "UPDATE attempts SET cost_micros = NULL, cost_source = NULL WHERE number = 1"
            )
    finally:
        conn.close()
    from afc_cli.spool import Spool

    spool = Spool(afc.cwd / "afc.db-spool")
    found = spool.find(job_id)
    [(request_hash,)] = afc.rows("SELECT request_hash FROM jobs")
    spool.describe(
        job_id,
        {
            "request_hash": request_hash,
            "provider": "local",
            "model": "demo-v1",
            "attempt": 1,
            "cost_micros": 50_000,
            "cost_source": "local",
            "size": found.size,
            "sha256": found.sha256,
        },
    )
    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert afc.rows("SELECT number, status, cost_micros, cost_source FROM attempts") == [
        (1, "succeeded", 50_000, "local"),
        (2, "failed", 0, "unsent"),
    ]
