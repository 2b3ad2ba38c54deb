"""A PostgreSQL ledger whose server stops taking writes mid-run (audit 37c).

An administrator puts the database read-only for maintenance (``ALTER SYSTEM SET
default_transaction_read_only = on`` and a reload, which reaches the sessions already open),
or the ledger's host name now leads to a standby after a failover. The worker's next write
failed with ``ReadOnlySqlTransaction``, which afc took for a bug: "unexpected error:
ReadOnlySqlTransaction: cannot execute UPDATE in a read-only transaction (a bug in afc)",
its calls in flight cancelled, left ``started`` (recorded unknown by the next run) and paid
for again: 68 calls for 60 jobs, 8 in flight. It is now the ledger's write error, as a lost
connection is: the calls in flight finish, their renders are kept in the spool, the worker
exits 1 with one line, and the next run stores them without a new call.
"""

from __future__ import annotations

import psycopg
import pytest
from test_postgres_connection_lost import break_mid_run, next_worker_finishes
from test_postgres_e2e import PgAfc


def _read_only(url: str, on: bool) -> None:
    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        if on:
            conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
        else:
            conn.execute("ALTER SYSTEM RESET default_transaction_read_only")
        conn.execute("SELECT pg_reload_conf()")


def test_a_server_made_read_only_mid_run_stops_the_worker_with_its_calls_kept(tmp_path, pg_url):
    pg = PgAfc(tmp_path, pg_url)

    def breaks():
        try:
            _read_only(pg_url, True)
        except psycopg.errors.InsufficientPrivilege:
            pytest.skip("the test server's user may not ALTER SYSTEM")

    env = {"AFC_LOCAL_CALL_LOG": str(tmp_path / "calls.log")}
    stderr = break_mid_run(pg, breaks, n=6, env=env, mend=lambda: _read_only(pg_url, False))
    assert "cannot write to the ledger postgresql://" in stderr, stderr
    assert "read-only transaction" in stderr, stderr
    assert "unexpected error" not in stderr and "bug in afc" not in stderr, stderr
    # the next worker finishes every job, and pays for none of the three calls again
    next_worker_finishes(pg, env, n=6)
