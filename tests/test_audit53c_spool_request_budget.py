"""Outside audit 53c: a request whose id only the spool kept counts ahead under a budget.

A run whose ledger could not record a job-style request's id as the provider accepted it
keeps the id beside the spool (``<job id>.request``, ``Spool.note_request``) and the next run
polls that request (``pipeline._noted_request``) rather than pay again. A resume under a
budget counts the requests it will take over before it starts a call of its own
(``count_adoptions``, tests/test_adopt_before_new.py), but read only the ledger's ids: a
request known by the spool alone was taken over after a new job's call had reserved the room
it would fill, and the resume paid for that call beside it, past its ``--max-spend``."""

from __future__ import annotations

import json
import signal
import sqlite3
import time

import pytest
from conftest import ledger_count
from test_adopt_before_new import fal_manifest


@pytest.mark.parametrize("command", ["resume", "worker"])
def test_a_request_kept_only_by_the_spool_is_counted_before_a_new_call(afc, fake, command):
    held = [(f"j{i}", f"hold {i}") for i in range(3)]
    afc.write_manifest(fal_manifest(held))
    proc = afc.popen("submit", "manifest.yaml")
    sql = "SELECT COUNT(*) FROM attempts WHERE provider_request_id IS NOT NULL"
    deadline = time.time() + 60
    while ledger_count(afc, "", sql) < 3 and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    # the state a run leaves whose ledger broke as fal accepted the requests (their ids kept
    # beside the spool, none in the ledger): tests/test_postgres_connection_lost.py makes
    # one so through a lost PostgreSQL connection
    spool = afc.cwd / "afc.db-spool"  # a SQLite ledger's, beside it
    conn = sqlite3.connect(afc.cwd / "afc.db")
    with conn:
        for job_id, number, request_id in conn.execute(
            "SELECT job_id, number, provider_request_id FROM attempts"
        ).fetchall():
            record = {"attempt": number, "provider": "fal", "request_id": request_id}
            (spool / f"{job_id}.request").write_text(json.dumps(record))
        conn.execute("UPDATE attempts SET provider_request_id = NULL")
    conn.close()
    # new jobs, in a batch run before the held jobs' (by name): their tasks reach their
    # attempts before the others' takeovers
    fresh = [(f"a{i}", f"plain {i}") for i in range(3)]
    afc.write_manifest({**fal_manifest(fresh), "batch": "a1"}, "fresh.yaml")
    admitted = afc("submit", "fresh.yaml", "--no-run")
    assert admitted.returncode == 0, admitted.stderr
    fake.released.set()

    if command == "resume":
        result = afc("resume", "--max-spend", "0.35", "--concurrency", "6")
    else:
        result = afc("worker", "--until-idle", "--max-spend", "0.35", "--concurrency", "6")
    assert fake.counts["fal_submit"] == 3, result.stderr
    shown = {job["key"]: job for job in afc.json("status", "--all")["jobs"]}
    assert [shown[f"j{i}"]["status"] for i in range(3)] == ["succeeded"] * 3
    for key, _ in fresh:
        assert shown[key]["status"] == "waiting" and shown[key]["attempts"] == 0, shown[key]
    assert "0.300000" in result.stderr, result.stderr
