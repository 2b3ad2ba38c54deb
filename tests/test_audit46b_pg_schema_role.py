"""A PostgreSQL role that may not change the ledger's schema, as operators give one per host.

PostgreSQL 15 grants no role but the database's owner ``CREATE`` on the ``public`` schema, and a
worker's role is often given only ``SELECT, INSERT, UPDATE, DELETE`` on tables another role
made. The first submit into an empty database as such a role, or the first command of a newer
afc whose migrations the ledger lacks, stopped with "unexpected error: InsufficientPrivilege
... (a bug in afc)", exit 1, naming no fix. It is the ledger's refusal now: exit 2, the role
and what to grant or whom to run afc as named, nothing of the schema changed.
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
def role(pg_server):
    """A login role, dropped afterwards (its grants in each database with it)."""
    name = f"afc_host_{uuid.uuid4().hex[:8]}"
    _as_owner(pg_server.admin_url, f"CREATE ROLE {name} LOGIN")
    made: list[str] = []
    yield name, made
    for url in made:
        _as_owner(url, f"DROP OWNED BY {name}")
    _as_owner(pg_server.admin_url, f"DROP ROLE {name}")


def _as_role(url: str, name: str) -> str:
    as_role = url.replace("://afc@", f"://{name}@", 1)
    assert as_role != url, "the test server's URL names its user afc"
    return as_role


def test_a_first_submit_as_a_role_without_create_on_the_schema_says_what_to_grant(
    tmp_path, pg_server, role
):
    name, made = role
    url = pg_server.database(migrated=False)
    made.append(url)
    _as_owner(url, "REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    pg = PgAfc(tmp_path, _as_role(url, name))
    pg.write_manifest(manifest(jobs(2)))
    result = pg("submit", "manifest.yaml")
    assert result.returncode == 2, result.stderr
    for noise in NOISE:
        assert noise not in result.stderr, result.stderr
    assert f"the server refused the role {name} (permission denied" in result.stderr
    assert f"GRANT CREATE ON SCHEMA public TO {name}" in result.stderr, result.stderr
    assert "afc left the database untouched" in result.stderr, result.stderr
    owner = PgAfc(tmp_path, url)
    assert owner.rows("SELECT to_regclass('afc_migrations'), to_regclass('jobs')") == [(None, None)]
    # granted, the same submit makes the ledger and runs its jobs
    _as_owner(url, f"GRANT CREATE ON SCHEMA public TO {name}")
    assert pg("submit", "manifest.yaml").returncode == 0
    assert owner.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("succeeded", 2)]


def test_a_newer_afc_run_as_a_worker_role_names_the_owner_to_migrate_as(tmp_path, pg_url, role):
    name, made = role
    made.append(pg_url)
    owner = PgAfc(tmp_path, pg_url)
    owner.write_manifest(manifest(jobs(2)))
    assert owner("submit", "manifest.yaml", "--no-run").returncode == 0
    # the ledger as the afc before m018 left it, its tables the owner's; the worker's role
    # may read and write them, as README's several machines have it
    _as_owner(
        pg_url,
        "DROP INDEX jobs_leased_order",
        "DROP INDEX jobs_blocked_order",
        "DELETE FROM afc_migrations WHERE name = 'm018_leased_and_blocked'",
        f"GRANT USAGE ON SCHEMA public TO {name}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {name}",
        f"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO {name}",
    )
    worker = PgAfc(tmp_path, _as_role(pg_url, name))
    result = worker("worker", "--until-idle", "--poll", "0.2")
    assert result.returncode == 2, result.stderr
    for noise in NOISE:
        assert noise not in result.stderr, result.stderr
    assert "needs migrations this afc brings (m018_leased_and_blocked)" in result.stderr
    assert f"the server refused the role {name} a change of its schema" in result.stderr
    assert "the role that owns the ledger's tables" in result.stderr, result.stderr
    assert owner.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("queued", 2)]
    # run once as the owner (which migrates), the worker's role runs the jobs
    assert owner("status").returncode == 0
    assert worker("worker", "--until-idle", "--poll", "0.2").returncode == 0
    assert owner.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("succeeded", 2)]


def test_a_search_path_naming_no_schema_is_refused_naming_it(tmp_path, pg_server):
    # README's advice for a database shared with an application: CREATE SCHEMA afc, then
    # ?options=-csearch_path%3Dafc in the URL; the URL given before the schema was made (or
    # with its name misspelt) stopped the first submit with "InvalidSchemaName ... (a bug)"
    url = pg_server.database(migrated=False)
    pg = PgAfc(tmp_path, f"{url}?options=-csearch_path%3Dafc")
    pg.write_manifest(manifest(jobs(1)))
    result = pg("submit", "manifest.yaml")
    assert result.returncode == 2, result.stderr
    for noise in NOISE:
        assert noise not in result.stderr, result.stderr
    assert "no schema of its search_path (afc) exists in that database" in result.stderr
    assert "CREATE SCHEMA" in result.stderr, result.stderr
    _as_owner(url, "CREATE SCHEMA afc")
    assert pg("submit", "manifest.yaml").returncode == 0
    assert pg.rows("SELECT status FROM jobs") == [("succeeded",)]


def test_a_newer_afcs_ledger_is_refused_as_newer_to_a_role_without_create(tmp_path, pg_url, role):
    # the fix is a newer afc, not a grant: said before the schema is touched
    name, made = role
    made.append(pg_url)
    owner = PgAfc(tmp_path, pg_url)
    _as_owner(
        pg_url,
        "INSERT INTO afc_migrations VALUES ('afc', 'm999_from_a_newer_afc', 0)",
        f"GRANT USAGE ON SCHEMA public TO {name}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {name}",
    )
    result = PgAfc(tmp_path, _as_role(pg_url, name))("status")
    assert result.returncode == 2, result.stderr
    assert "m999_from_a_newer_afc" in result.stderr and "Upgrade afc" in result.stderr
    assert "GRANT" not in result.stderr and "bug in afc" not in result.stderr, result.stderr
    assert owner("status").returncode == 2
