"""A worker's claim names the jobs its loop still runs (``skip``) in one statement whatever
their number, on PostgreSQL (``Ledger._none_of``): psycopg prepares a statement once it ran
five times and keeps 100, and a claim that spelled each count of running jobs as its own
statement made one per count, at ``--concurrency`` 33 and more more than psycopg keeps,
pushing the statements every job writes out of the server's cache to be prepared again."""

from __future__ import annotations

from conftest import jobs, manifest

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest


def test_claims_skipping_any_number_of_running_jobs_share_their_statements(afc, pg_url):
    path = afc.write_manifest(manifest(jobs(3)))
    ledger = Ledger(pg_url)
    try:
        ledger.admit(load_manifest(path), f"file://{afc.cwd}/out", RateCards())
        ids = [f"running-{n}" for n in range(60)]
        for count in range(1, 61):
            for _ in range(6):  # past psycopg's prepare threshold (5)
                assert ledger.claim_runnable(0, 300, skip=ids[:count], settle=False) == []
        prepared = ledger.db.execute("SELECT statement FROM pg_prepared_statements").fetchall()
        claims = [sql for (sql,) in prepared if sql.startswith("WITH c AS MATERIALIZED")]
        assert len(claims) == 1, claims
    finally:
        ledger.close()
