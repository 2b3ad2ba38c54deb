"""What the PostgreSQL tests of a run beside a stalled re-submit, cancel or replay share
(tests/test_audit56g_*, test_audit57a_*, test_audit57e_*, test_audit58b_*): their look at the
server's lock waits, at a run's leases, and their stopping of the processes they froze."""

from __future__ import annotations

import psycopg


def run_out_by(url: str, key: str) -> float:
    """How long ago, by the server's clock, the job ``key``'s lease ran out (negative: not
    yet). A run renewing every second (``AFC_LEASE_S=3``) has come by a job's row at least
    twice once its lease, untouched, ran out: the row was held by another transaction."""
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            "SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8 - lease_expires FROM jobs"
            " WHERE key = %s",
            (key,),
        ).fetchone()[0]
