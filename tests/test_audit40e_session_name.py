"""Outside audit 40e: afc's own PostgreSQL sessions are named in pg_stat_activity.

A re-submit that waited 30 s on a job row and failed with "another session held a lock on the
ledger's jobs too long ... pg_stat_activity shows it" was held by an 'afc worker' whose run
loop was blocked writing a progress line to a pipe nobody read (its group transaction open,
``PostgresLedger.tx``): pg_stat_activity showed that session with an empty application_name,
not to be told from a psql session or another application's. afc now names its sessions 'afc'
(libpq's ``fallback_application_name``: a URL's own ``application_name`` still wins), and the
lock-timeout message says how to find them there.
"""

from __future__ import annotations

import pytest

pytest.importorskip("psycopg")

from afc_cli.errors import ledger_write_error  # noqa: E402
from afc_cli.ledger.postgres import PostgresLedger  # noqa: E402


def _name(ledger: PostgresLedger) -> str:
    return ledger.db.raw.execute(
        "SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()"
    ).fetchone()[0]


def test_an_afc_session_is_named_afc_in_pg_stat_activity(pg_url):
    ledger = PostgresLedger(pg_url)
    try:
        assert _name(ledger) == "afc"
    finally:
        ledger.close()


def test_a_url_keeps_its_own_application_name(pg_url):
    sep = "&" if "?" in pg_url else "?"
    ledger = PostgresLedger(f"{pg_url}{sep}application_name=render-farm")
    try:
        assert _name(ledger) == "render-farm"
    finally:
        ledger.close()


def test_the_lock_timeout_message_tells_how_to_find_an_afc_session(pg_url):
    psycopg = pytest.importorskip("psycopg")
    exc = psycopg.errors.LockNotAvailable("canceling statement due to lock timeout")
    said = str(ledger_write_error(pg_url, exc))
    assert "pg_stat_activity" in said
    assert "application_name 'afc'" in said, said
