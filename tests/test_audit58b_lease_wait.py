"""A run's write of its lease that waited for a row another transaction held, on a
PostgreSQL ledger (outside audit 58b): the lease's expiry was reckoned before the statement
waited, so a wait longer than the lease wrote a lease already run out, and another host
could take the job over (and pay for it again) while the run's paid call was in flight."""

from __future__ import annotations

import threading
import time

import psycopg
from conftest import jobs, manifest

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest

LEASE_S = 0.5


def _lock_waited(url: str) -> float:
    """How long the longest lock wait in the database has lasted, in seconds (0: none)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            "SELECT COALESCE(MAX(EXTRACT(EPOCH FROM clock_timestamp() - query_start)), 0)"
            " FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock'"
        ).fetchone()[0]


def test_a_lease_kept_after_a_wait_runs_out_a_lease_after_the_wait(afc, pg_url):
    """A run looks at its job before a paid request (``keep_lease``, pipeline ``_last_look``)
    while a re-submit holds the job's row (writing the batch's moved webhook, and stalled,
    or waiting on a stalled holder of its own, up to LOCK_WAIT_S); the look waits longer than
    the lease. It returned True, the request about to leave, with the expiry it reckoned
    before it waited, already past: another host could take the job over at once and pay
    for it again. Now the lease it writes runs out a lease after the wait ended."""
    path = afc.write_manifest(manifest(jobs(1)))
    ledger = Ledger(pg_url)
    try:
        m = load_manifest(path)
        ledger.admit(m, "file:///tmp/x", RateCards())
        job_id = m.jobs[0].job_id
        assert ledger.claim(job_id, LEASE_S) is not None
        kept: list[bool] = []
        with psycopg.connect(pg_url) as holder:  # the re-submit, holding the job's row
            holder.execute("SELECT id FROM jobs WHERE id = %s FOR UPDATE", (job_id,))
            look = threading.Thread(target=lambda: kept.append(ledger.keep_lease(job_id, LEASE_S)))
            look.start()
            deadline = time.monotonic() + 60
            while _lock_waited(pg_url) < 2 * LEASE_S:
                assert time.monotonic() < deadline, "the look never waited"
                time.sleep(0.02)
            holder.commit()
        look.join(timeout=60)
        assert kept == [True]
        with psycopg.connect(pg_url, autocommit=True) as conn:
            left = conn.execute(
                "SELECT lease_expires - EXTRACT(EPOCH FROM clock_timestamp()) FROM jobs"
                " WHERE id = %s",
                (job_id,),
            ).fetchone()[0]
        assert left > 0, f"the look wrote a lease {-left:.2f} s run out"
    finally:
        ledger.close()
