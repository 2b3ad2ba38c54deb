"""Outside audit 51f: a submit, cancel or retry waiting past lock_timeout for a newer afc's
migration of a PostgreSQL ledger.

A newer afc's migration of a large ledger holds ``jobs`` (``LOCK TABLE jobs IN EXCLUSIVE
MODE``) for minutes. A command that writes jobs meanwhile (a cron'd 'afc submit', its
admission; an 'afc cancel') waits for it past the session's lock_timeout and stops, exit 1,
nothing of it written, as for any lock held too long: it named a psql session left in a
transaction, an 'afc ledger copy' or a large re-submit as what held it, never the migration,
the likely cause while a host is being upgraded.
"""

from __future__ import annotations

import psycopg
from conftest import jobs, manifest


def test_a_write_that_waits_past_lock_timeout_names_a_migration_among_the_holders(afc, pg_url):
    from afc_cli.ledger.postgres import MIGRATION_LOCK

    afc.env["AFC_LEDGER"] = pg_url
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    afc.write_manifest(manifest(jobs(3)))
    with psycopg.connect(pg_url) as conn:  # a newer afc's migration under way
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute("LOCK TABLE jobs IN EXCLUSIVE MODE")
        said = [
            afc(*args, env={"PGOPTIONS": "-c lock_timeout=500"})
            for args in (["submit", "manifest.yaml", "--no-run"], ["cancel", "--batch", "b1"])
        ]
        conn.rollback()
    for ran in said:
        assert ran.returncode == 1, ran.stderr
        assert "a newer afc migrating the ledger" in ran.stderr, ran.stderr
        assert "Traceback" not in ran.stderr
    statuses = {job["key"]: job["status"] for job in afc.json("status", "--all")["jobs"]}
    assert statuses == {"shot-001": "queued"}  # nothing admitted, nothing cancelled
