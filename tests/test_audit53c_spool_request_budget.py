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
import sqlite3

import pytest
from test_adopt_before_new import kill_while_rendering, run_beside_new_jobs


@pytest.mark.parametrize("command", ["resume", "worker"])
def test_a_request_kept_only_by_the_spool_is_counted_before_a_new_call(afc, fake, command):
    kill_while_rendering(afc, "")
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
    run_beside_new_jobs(afc, fake, command)
