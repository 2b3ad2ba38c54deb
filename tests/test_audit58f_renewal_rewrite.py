"""A run's try at its stale leases whose statement waited, on a PostgreSQL ledger (outside
audit 58f): its second write, reckoned from after the wait (``Ledger._write_lease``),
looked for the rows again by the try's own condition, stale leases, which the first write
had just made fresh: it rewrote none of them, and left the leases it reckoned before the
wait."""

from __future__ import annotations

import threading
import time

import psycopg
from conftest import jobs, manifest
from test_audit58b_lease_wait import _lock_waited

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest

LEASE_S = 0.5


def test_a_stale_try_that_waited_writes_its_leases_again(afc, pg_url):
    """The run's try at its stale leases (``renew_leases(stale=True)``, every 20 ms while a
    row is held elsewhere) waits at the jobs table longer than the lease (another session's
    SHARE lock: a non-concurrent index build; a server stalled on its disk). The leases it
    wrote were run out the moment the wait ended, as in 58b's keep_lease, and the rewrite
    meant for that found no stale row to write: another host could take the jobs over and
    pay for them again while the run's calls were in flight. Now the rows the first write
    renewed are the ones written again."""
    path = afc.write_manifest(manifest(jobs(2)))
    ledger = Ledger(pg_url)
    try:
        m = load_manifest(path)
        ledger.admit(m, "file:///tmp/x", RateCards())
        for job in m.jobs:
            assert ledger.claim(job.job_id, LEASE_S) is not None
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("UPDATE jobs SET lease_expires = EXTRACT(EPOCH FROM clock_timestamp())")
        tried: list[int] = []
        with psycopg.connect(pg_url) as holder:
            holder.execute("LOCK TABLE jobs IN SHARE MODE")
            renew = threading.Thread(
                target=lambda: tried.append(ledger.renew_leases(LEASE_S, stale=True))
            )
            renew.start()
            deadline = time.monotonic() + 60
            while _lock_waited(pg_url) < 2 * LEASE_S:
                assert time.monotonic() < deadline, "the try never waited"
                time.sleep(0.02)
            holder.commit()
        renew.join(timeout=60)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            left = [
                row[0]
                for row in conn.execute(
                    "SELECT lease_expires - EXTRACT(EPOCH FROM clock_timestamp())::float8 FROM jobs"
                )
            ]
        assert min(left) > 0, f"the try wrote a lease {-min(left):.2f} s run out"
        assert tried == [0]  # both renewed, none counted held elsewhere
    finally:
        ledger.close()
