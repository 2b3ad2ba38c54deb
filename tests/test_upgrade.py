"""Upgrading afc under a live batch: a ledger an older afc is still running on.

The older ledger is the current schema taken back by its last migration (m009_lease_mono
dropped: its column and its bookkeeping row), which is exactly the schema m001..m008 build,
since migrations are append-only and never edited (afc_cli/migrations.py). Each test runs on
SQLite and on PostgreSQL (tests/pg_server.py).

What an older afc does when a newer one migrates the PostgreSQL ledger under it was measured
with the build before m009 (e0b7ccd) running ``afc worker``: its next statement on a changed
table fails ("cached plan must not change result type"), it stops in the middle of its jobs
with "a bug in afc", and a render it had paid for but not spooled is paid for again by the
next worker. That build cannot be changed; this afc refuses to migrate under it instead.
"""

from __future__ import annotations

import sqlite3
import time

from conftest import jobs, manifest

from afc_cli.owner import host_id

LAST = "m009_lease_mono"
OTHER_HOST = "render-07:4242:1"  # an older afc's worker on another host


def _sql(ledger_url: str, afc, statements: list[str]) -> None:
    if ledger_url.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(ledger_url, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)
        return
    conn = sqlite3.connect(afc.cwd / ledger_url)
    try:
        for statement in statements:
            conn.execute(statement)
        conn.commit()
    finally:
        conn.close()


def _applied(ledger_url: str, afc) -> list[str]:
    if ledger_url.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(ledger_url) as conn:
            return [r[0] for r in conn.execute("SELECT name FROM afc_migrations ORDER BY name")]
    conn = sqlite3.connect(afc.cwd / ledger_url)
    try:
        return [r[0] for r in conn.execute("SELECT name FROM _sqlite_migrations ORDER BY name")]
    finally:
        conn.close()


def _before_last_migration(ledger_url: str, afc) -> None:
    """The ledger as the afc before m009 left it (its schema, its bookkeeping)."""
    table = "afc_migrations" if ledger_url.startswith("postgresql://") else "_sqlite_migrations"
    statements = [
        "ALTER TABLE jobs DROP COLUMN lease_mono",
        f"DELETE FROM {table} WHERE name = '{LAST}'",
    ]
    if table == "_sqlite_migrations":
        statements.append("PRAGMA user_version = 8")
    _sql(ledger_url, afc, statements)


def _lease(ledger_url: str, afc, owner: str, key: str, expires: float) -> None:
    _sql(
        ledger_url,
        afc,
        [
            f"UPDATE jobs SET status = 'running', lease_owner = '{owner}',"
            f" lease_expires = {expires} WHERE key = '{key}'"
        ],
    )


def _admitted(afc, ledger_url: str) -> None:
    afc.write_manifest(manifest(jobs(3)))
    result = afc("submit", "manifest.yaml", "--no-run", "--ledger", ledger_url)
    assert result.returncode == 0, result.stderr
    _before_last_migration(ledger_url, afc)


def test_a_migration_waits_for_a_live_older_run(afc, ledger_url):
    _admitted(afc, ledger_url)
    _lease(ledger_url, afc, OTHER_HOST, "shot-001", time.time() + 300)
    calls = afc.cwd / "calls.log"
    env = {"AFC_LOCAL_CALL_LOG": str(calls)}
    for command in (
        ["resume"],
        ["worker", "--until-idle"],
        ["submit", "manifest.yaml"],
    ):
        result = afc(*command, "--ledger", ledger_url, env=env)
        assert result.returncode == 2, (command, result.stderr)
        line = result.stderr.strip()
        assert LAST in line and OTHER_HOST in line and "stop those processes" in line, line
        assert "Traceback" not in result.stderr
    assert not calls.exists()  # nothing paid
    assert LAST not in _applied(ledger_url, afc)  # nothing migrated

    # the older worker drained (its lease let go): the upgrade goes ahead, each job once
    _lease(ledger_url, afc, OTHER_HOST, "shot-001", time.time() - 1)
    result = afc("resume", "--ledger", ledger_url, env=env)
    assert result.returncode == 0, result.stderr
    assert LAST in _applied(ledger_url, afc)
    assert len(calls.read_text().splitlines()) == 3


def test_a_dead_process_of_this_host_and_a_spool_hold_do_not_stop_a_migration(afc, ledger_url):
    _admitted(afc, ledger_url)
    far = time.time() + 300
    _lease(ledger_url, afc, f"{host_id()}:999999999:1", "shot-001", far)  # no such process
    _lease(ledger_url, afc, f"{host_id()}:0:0", "shot-002", far)  # a host's spool hold
    result = afc("status", "--ledger", ledger_url)
    assert result.returncode == 0, result.stderr
    assert LAST in _applied(ledger_url, afc)
