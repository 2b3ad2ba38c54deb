"""A run's lease renewal on a PostgreSQL ledger beside a transaction that only refers to one
of its jobs (outside audit 58f): the renewal takes the rows no other transaction holds
(``SKIP LOCKED``, 432e7bb), and it locked them ``FOR UPDATE``, which a foreign key's
``FOR KEY SHARE`` lock conflicts with (a row of attempts, steps, deliveries or reviews being
written for the job). Its own ``UPDATE`` never waited for such a lock."""

from __future__ import annotations

import psycopg
from conftest import jobs, manifest

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest


def _left(url: str, job_id: str) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            "SELECT lease_expires - EXTRACT(EPOCH FROM clock_timestamp())::float8 FROM jobs"
            " WHERE id = %s",
            (job_id,),
        ).fetchone()[0]


def test_a_row_only_referred_to_is_renewed(afc, pg_url):
    """Another session writes a row referring to the job (an attempt, a step, a delivery:
    its foreign key takes ``FOR KEY SHARE`` on the job's row) and has not committed yet. The
    renewal passed the row by as held and left its lease to run out: tried again every 20 ms
    for as long as that transaction lasted, and, had it outlasted the lease, the job was
    another host's to take over the moment it ended. A ``FOR NO KEY UPDATE`` lock, as the
    ``UPDATE`` itself takes, is not held off by it: the lease is renewed at once."""
    path = afc.write_manifest(manifest(jobs(1)))
    ledger = Ledger(pg_url)
    try:
        m = load_manifest(path)
        ledger.admit(m, "file:///tmp/x", RateCards())
        job_id = m.jobs[0].job_id
        assert ledger.claim(job_id, 5.0) is not None
        with psycopg.connect(pg_url) as other:
            other.execute(
                "INSERT INTO steps (job_id, step, completed_at) VALUES (%s, 'audit', 0)",
                (job_id,),
            )
            assert ledger.renew_leases(600.0) == 0
            other.rollback()
        assert _left(pg_url, job_id) > 500
    finally:
        ledger.close()
