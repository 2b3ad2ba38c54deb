"""Outside audit 51f: an 'afc submit --no-run' opened while a newer afc migrates the ledger.

A run opened during a newer afc's migration waits for it before its first claim and stops,
exit 2 (``run.run_jobs``: ``check_schema(wait=True)``). An admission did not: a cron'd 'afc
submit --no-run' (or a submit's admission, before its run) opened the ledger as the migration
ran, read the migrations committed before it, and its transaction waited for the migration's
lock, then wrote the manifest's jobs with the older code on the newer schema (rows without
what the newer afc's columns need, on SQLite) and exited 0. It now waits for the migration
under way, then stops, exit 2, nothing admitted.
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import contextmanager

import psycopg
from conftest import jobs, manifest
from test_audit51c_claim_during_migration import _newer_migration, _opened
from test_upgrade import NEWER, _rows


def _submit_during_migration(afc, ledger_url: str, migrating):
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml", "--no-run", "--ledger", ledger_url).returncode == 0
    afc.write_manifest(manifest(jobs(3)))
    with migrating() as commit:
        submit = afc.popen("submit", "manifest.yaml", "--no-run", "--ledger", ledger_url)
        try:
            commit(submit)
            code = submit.wait(timeout=60)
        finally:
            if submit.poll() is None:
                submit.kill()
                submit.wait()
    stderr = submit.stderr.read()
    assert code == 2, stderr
    assert NEWER in stderr and "was migrated by a newer afc" in stderr, stderr
    assert "Traceback" not in stderr and "a bug in afc" not in stderr, stderr
    keys = [row[0] for row in _rows(ledger_url, afc, "SELECT key FROM jobs ORDER BY key")]
    assert keys == ["shot-001"]  # nothing admitted on the newer schema


def test_an_admission_opened_during_a_postgres_migration_waits_for_it_and_stops(afc, pg_url):
    from afc_cli.ledger.postgres import MIGRATION_LOCK

    @contextmanager
    def migrating():
        with psycopg.connect(pg_url) as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            conn.execute("LOCK TABLE jobs IN EXCLUSIVE MODE")

            def commit(submit) -> None:
                deadline = time.time() + 30
                with psycopg.connect(pg_url, autocommit=True) as look:
                    while time.time() < deadline:
                        waiting = look.execute(
                            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                        ).fetchone()[0]
                        if waiting:
                            break
                        time.sleep(0.02)
                for statement in _newer_migration(pg_url):
                    conn.execute(statement)
                conn.commit()

            yield commit

    _submit_during_migration(afc, pg_url, migrating)


def test_an_admission_opened_during_a_sqlite_migration_waits_for_it_and_stops(afc):
    ledger = "afc.db"

    @contextmanager
    def migrating():
        conn = sqlite3.connect(afc.cwd / ledger, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")  # the migration's write lock

            def commit(submit) -> None:
                _opened(submit, afc.cwd / ledger)
                time.sleep(1.0)  # its admission waits for the write lock
                for statement in _newer_migration(ledger):
                    conn.execute(statement)
                conn.execute("COMMIT")

            yield commit
        finally:
            conn.close()

    _submit_during_migration(afc, ledger, migrating)
