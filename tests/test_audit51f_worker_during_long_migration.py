"""Outside audit 51f: an idle worker polling while a newer afc's migration outlasts its wait.

A newer afc's migration of a large PostgreSQL ledger holds afc's migration lock and ``jobs``
(``LOCK TABLE jobs IN EXCLUSIVE MODE``) for minutes. A run waiting for it past the session's
lock_timeout says another afc is migrating the ledger, exit 2, nothing run (3848bc5). A worker
left polling meanwhile (an older one, whose host is not upgraded yet, with nothing to do) looks
at the migrations committed before it, then its claim waits for the migration's lock on
``jobs`` past lock_timeout: it said 'another session held a lock on the ledger's jobs too long
(a psql session left in a transaction ...)', exit 1, where it is another afc migrating.
"""

from __future__ import annotations

import time

import psycopg
from conftest import jobs, manifest


def test_an_idle_worker_whose_claim_outwaits_a_migration_says_another_afc_migrates(afc, pg_url):
    from afc_cli.ledger.postgres import MIGRATION_LOCK

    afc.env["AFC_LEDGER"] = pg_url
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    with psycopg.connect(pg_url, autocommit=True) as conn:  # the job is another host's
        conn.execute("UPDATE jobs SET lease_owner = 'someone:1:1', lease_expires = 1e12")
    calls = afc.cwd / "calls.log"
    worker = afc.popen(
        "worker",
        "--poll",
        "0.1",
        env={
            "PGOPTIONS": "-c lock_timeout=500",
            "AFC_LOCAL_CALL_LOG": str(calls),
            "AFC_SPOOL_DIR": str(afc.cwd / "spool"),
        },
    )
    try:
        time.sleep(1.0)  # polling, with nothing of its own to run
        assert worker.poll() is None, worker.stderr.read()
        with psycopg.connect(pg_url) as conn:  # a newer afc's migration, as it begins
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            conn.execute("LOCK TABLE jobs IN EXCLUSIVE MODE")
            code = worker.wait(timeout=60)  # its claim waits past lock_timeout
            conn.rollback()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    stderr = worker.stderr.read()
    assert code == 2, stderr
    assert "another afc is migrating the ledger" in stderr, stderr
    assert "psql session" not in stderr, stderr
    assert "Traceback" not in stderr and "a bug in afc" not in stderr, stderr
    assert not calls.exists()
