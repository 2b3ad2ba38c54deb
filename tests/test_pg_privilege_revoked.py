"""A PostgreSQL role that loses its privilege on the ledger's tables under a running worker.

An administrator revokes the role afc connects as (``REVOKE UPDATE ON jobs``): the worker's
next write failed with ``InsufficientPrivilege``, which afc took for a bug ("unexpected error
... (a bug in afc)"), its calls in flight cancelled, left ``started`` and paid for again by
the next run. It is the ledger's write error now, as a read-only server's is
(tests/test_audit37c_read_only.py): the calls in flight finish, their renders are kept in the
spool, the worker exits 1 with one line naming the fix, and the next run stores them without
a new call.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from test_postgres_connection_lost import break_mid_run, next_worker_finishes
from test_postgres_e2e import PgAfc


def _as_owner(url: str, *statements: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for sql in statements:
            conn.execute(sql)


@pytest.fixture
def role(pg_url):
    """A login role with what a worker needs on the ledger's tables, dropped afterwards."""
    name = f"afc_worker_{uuid.uuid4().hex[:8]}"
    _as_owner(
        pg_url,
        f"CREATE ROLE {name} LOGIN",
        f"GRANT USAGE ON SCHEMA public TO {name}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {name}",
        f"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO {name}",
    )
    yield name
    _as_owner(pg_url, f"DROP OWNED BY {name}", f"DROP ROLE {name}")


def test_a_privilege_revoked_mid_run_stops_the_worker_with_its_calls_kept(tmp_path, pg_url, role):
    owner = PgAfc(tmp_path, pg_url)
    worker_url = pg_url.replace("://afc@", f"://{role}@", 1)
    assert worker_url != pg_url, "the test server's URL names its user afc"
    pg = PgAfc(tmp_path, worker_url)
    env = {"AFC_LOCAL_CALL_LOG": str(tmp_path / "calls.log")}
    stderr = break_mid_run(
        pg,
        lambda: _as_owner(pg_url, f"REVOKE UPDATE ON jobs FROM {role}"),
        n=6,
        env=env,
        mend=lambda: _as_owner(pg_url, f"GRANT UPDATE ON jobs TO {role}"),
        owner=owner,
    )
    assert f"cannot write to the ledger postgresql://{role}@" in stderr, stderr
    assert "permission denied" in stderr and "grant it (GRANT SELECT" in stderr, stderr
    assert "unexpected error" not in stderr and "bug in afc" not in stderr, stderr
    # the next worker finishes every job, and pays for none of the three calls again
    next_worker_finishes(pg, env, n=6, owner=owner)
