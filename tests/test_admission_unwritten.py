"""A submit whose admission cannot be written says to run the submit again, not 'afc resume':
the admission is one transaction, so nothing of the manifest was admitted, and a resume runs
no job the manifest would have added (left open by outside audit 25e). Here a PostgreSQL
session holds the jobs table against writes (a psql session in a transaction, a copy) past
the server's statement_timeout."""

from __future__ import annotations

import psycopg
import pytest
from conftest import jobs, manifest
from test_postgres_e2e import PgAfc


@pytest.fixture
def pg(tmp_path, pg_url) -> PgAfc:
    return PgAfc(tmp_path, pg_url)


def test_an_admission_that_cannot_be_written_says_to_run_the_submit_again(pg):
    pg.write_manifest(manifest(jobs(2)))
    holder = psycopg.connect(pg.url)
    try:
        holder.execute("LOCK TABLE jobs IN SHARE MODE")  # reads go on, writes wait
        held = pg(
            "submit", "manifest.yaml", "--no-run", env={"PGOPTIONS": "-c statement_timeout=500"}
        )
    finally:
        holder.rollback()
        holder.close()
    assert held.returncode == 1, held.stderr
    assert "Traceback" not in held.stderr
    assert "nothing of" in held.stderr and "was admitted" in held.stderr, held.stderr
    assert "run this submit again" in held.stderr, held.stderr
    assert "afc resume" not in held.stderr, held.stderr
    assert pg.rows("SELECT COUNT(*) FROM jobs") == [(0,)]
    again = pg("submit", "manifest.yaml", "--no-run")
    assert again.returncode == 0, again.stderr
    assert pg.rows("SELECT COUNT(*) FROM jobs") == [(2,)]
