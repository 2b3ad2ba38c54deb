"""A PostgreSQL role not granted (some of) the ledger's tables, met by a read.

Operators give each host's afc a role of its own and grant it the tables that exist (``GRANT
... ON ALL TABLES IN SCHEMA``), which leaves out a role made before its grant and a table a
later migration makes. A write such a role may not make was the ledger's error already
(tests/test_pg_privilege_revoked.py), but a read stopped every command with "unexpected error:
InsufficientPrivilege ... (a bug in afc)": the first one as the ledger opens ('afc status',
'afc plan', 'afc worker'), and a read of a table left out ('afc status', a worker's claim). The
first is refused now, exit 2, naming the role and what to grant it; the second is the ledger's
error, exit 1, as a lost connection's under a reading command or a run.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from conftest import jobs, manifest
from test_postgres_e2e import PgAfc

NOISE = ("unexpected error", "a bug in afc", "Traceback")


def _as_owner(url: str, *statements: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for sql in statements:
            conn.execute(sql)


@pytest.fixture
def role(pg_url):
    name = f"afc_host_{uuid.uuid4().hex[:8]}"
    _as_owner(pg_url, f"CREATE ROLE {name} LOGIN")
    yield name
    _as_owner(pg_url, f"DROP OWNED BY {name}", f"DROP ROLE {name}")


@pytest.fixture
def ledger(tmp_path, pg_url, role) -> tuple[PgAfc, PgAfc]:
    """The owner's ledger with two jobs queued, and ``afc`` as ``role``."""
    owner = PgAfc(tmp_path, pg_url)
    owner.write_manifest(manifest(jobs(2)))
    assert owner("submit", "manifest.yaml", "--no-run").returncode == 0
    host = PgAfc(tmp_path, pg_url.replace("://afc@", f"://{role}@", 1))
    assert host.url != pg_url, "the test server's URL names its user afc"
    return owner, host


def _quiet(result, code: int) -> str:
    assert result.returncode == code, result.stderr
    for noise in NOISE:
        assert noise not in result.stderr, result.stderr
    return result.stderr


@pytest.mark.parametrize("command", [("status",), ("plan", "manifest.yaml"), ("worker",)])
def test_a_role_granted_nothing_is_told_what_to_grant(ledger, role, command):
    owner, host = ledger
    args = (*command, "--until-idle") if command == ("worker",) else command
    said = _quiet(host(*args), 2)
    assert "cannot read the ledger postgresql://" in said, said
    assert "permission denied for table" in said, said
    assert f"grant the role {role} afc's tables" in said, said
    assert owner.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("queued", 2)]


def test_a_table_left_out_of_the_roles_grant_is_the_ledgers_error(ledger, pg_url, role):
    owner, host = ledger
    _as_owner(
        pg_url,
        f"GRANT USAGE ON SCHEMA public TO {role}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}",
        f"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO {role}",
        f"REVOKE ALL ON batches FROM {role}",  # as a table made after the grant
    )
    said = _quiet(host("status"), 1)
    assert "cannot read the ledger postgresql://" in said, said
    assert "permission denied for table batches" in said, said
    assert "this command changed nothing" in said, said
    said = _quiet(host("worker", "--until-idle", "--poll", "0.2"), 1)
    assert "permission denied for table batches" in said, said
    # granted, the role's worker runs both jobs
    _as_owner(pg_url, f"GRANT SELECT, INSERT, UPDATE, DELETE ON batches TO {role}")
    assert host("worker", "--until-idle", "--poll", "0.2").returncode == 0
    assert owner.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("succeeded", 2)]
