"""A run's tries at the leases another transaction held, on a PostgreSQL ledger (outside
audit 58f): ``renew_leases(stale=True)`` counted the rows it could not renew after renewing
the others, whose leases were then no longer stale, and took their number off that count."""

from __future__ import annotations

import psycopg
from conftest import jobs, manifest

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest

LEASE_S = 3.0


def test_a_try_that_renews_the_free_rows_still_counts_the_held_one(afc, pg_url):
    """A run holds three jobs; another transaction holds the first's row (a stalled 'afc
    cancel', a psql session) past what its lease had left. A third of a lease into the
    run's tries, the other two leases are stale too: the try renewed them, then counted the
    stale rows left (the held one: 1) less the two it renewed, and said none was held. The
    run went back to renewing every third of a lease, and a row let go meanwhile, its lease
    run out under the hold, was any host's to take over for up to that long (100 s at the
    default lease), where its tries every 20 ms would have renewed it at once."""
    path = afc.write_manifest(manifest(jobs(3)))
    ledger = Ledger(pg_url)
    try:
        m = load_manifest(path)
        ledger.admit(m, "file:///tmp/x", RateCards())
        ids = [job.job_id for job in m.jobs]
        for job_id in ids:
            assert ledger.claim(job_id, LEASE_S) is not None
        with psycopg.connect(pg_url, autocommit=True) as conn:
            # a third of a lease gone by: every lease has less than two thirds of one left
            conn.execute(
                "UPDATE jobs SET lease_expires = EXTRACT(EPOCH FROM clock_timestamp())::float8"
                " + %s",
                (LEASE_S / 2,),
            )
        with psycopg.connect(pg_url) as other:
            other.execute("SELECT id FROM jobs WHERE id = %s FOR UPDATE", (ids[0],))
            assert ledger.renew_leases(LEASE_S, stale=True) == 1
            other.rollback()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            left = dict(
                conn.execute(
                    "SELECT id, lease_expires - EXTRACT(EPOCH FROM clock_timestamp())::float8"
                    " FROM jobs"
                ).fetchall()
            )
        assert all(left[job_id] > LEASE_S * 2 / 3 for job_id in ids[1:])
    finally:
        ledger.close()
