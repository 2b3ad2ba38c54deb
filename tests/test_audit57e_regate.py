"""A re-submit changing the gates of jobs a run stalled past its lease still holds, beside
that run woken, on a PostgreSQL ledger (outside audit 57e): the admission wrote the first
job's gates (its lease had run out, so ``_regate`` may), the woken run's renewal (every job it
holds, one statement) took the second's row and waited for the first's, and the admission's
write of the second waited for the renewal: a deadlock, PostgreSQL failing one of the two."""

from __future__ import annotations

import signal
import time

import psycopg
from conftest import frozen_at, manifest, wait_for_ledger
from pg_stalls import on_replicate, stop, wake_until_ended


def test_a_resubmit_regating_a_stalled_runs_jobs_is_no_deadlock(afc, fake, pg_url):
    """Host a's run renders one job on Replicate (held) and holds two more queued behind the
    provider's one slot (no attempt yet). It stalls (SIGSTOP) past its lease; the batch is
    submitted again asking a review of the two, which their lapsed lease lets it write. The
    re-submit stalls after writing the first; host a wakes and renews its leases, in the
    order of its index: the second's row, then a wait for the first's. Woken, the re-submit
    wrote the second: a deadlock. Now the rows of jobs another run holds a lapsed lease of
    are taken all at once before any is written, so the renewal waits for the re-submit,
    holding none of them."""
    # each held once it renders: whichever takes the slot first, the other two wait for it
    jobs = [{"key": key, "prompt": f"hold render {key}"} for key in ("shot-p", "shot-q", "shot-r")]
    data = manifest(jobs)
    on_replicate(data)
    data["limits"] = {"replicate": {"concurrency": 1}}
    afc.write_manifest(data)
    env = {"AFC_LEDGER": pg_url, "AFC_GRACE_S": "0"}
    holder = afc.popen(
        "submit", "manifest.yaml", env={**env, "AFC_HOST_ID": "host-a", "AFC_LEASE_S": "3"}
    )
    again = None
    try:
        wait_for_ledger(
            afc,
            pg_url,
            "SELECT COUNT(*) = 2 FROM jobs WHERE attempts = 0 AND lease_owner IS NOT NULL"
            " AND EXISTS (SELECT 1 FROM jobs WHERE status = 'waiting'"
            " AND waiting_reason LIKE 'provider still rendering%')",
            proc=holder,
        )
        holder.send_signal(signal.SIGSTOP)
        frozen_at(holder)
        with psycopg.connect(pg_url) as conn:
            # the renewal locks the rows in the order of its index (jobs_lease_owner), as
            # this select reads them: the re-submit writes the last of them first
            order = [
                row[0]
                for row in conn.execute(
                    "SELECT key FROM jobs WHERE lease_owner = (SELECT MIN(lease_owner) FROM jobs)"
                    " AND status NOT IN ('succeeded', 'failed', 'cancelled') AND attempts = 0"
                )
            ]
            # its lease ran out meanwhile
            conn.execute("UPDATE jobs SET lease_expires = 0")
        assert len(order) == 2, order
        by_key = {job["key"]: job for job in jobs}
        rendering = [by_key[k] for k in by_key if k not in order]
        data["jobs"] = rendering + [{**by_key[k], "review": True} for k in order[::-1]]
        afc.write_manifest(data, "again.yaml")
        again = afc.popen(
            "submit",
            "again.yaml",
            "--no-run",
            env={**env, "AFC_HOST_ID": "host-b", "AFC_STALL_POINT": "regated_one"},
        )
        frozen_at(again, timeout=60)  # the first job's gates written, the second's not yet
        holder.send_signal(signal.SIGCONT)
        # the woken run's renewal meets the rows the re-submit holds (and renews the other)
        wait_for_ledger(
            afc, pg_url, "SELECT COUNT(*) FROM jobs WHERE lease_expires > 0", proc=holder
        )
        wake_until_ended(again, "re-submit")
        time.sleep(0.5)  # (a moment for the run to meet a failed renewal, if it was failed)
        alive = holder.poll() is None
    finally:
        stop(holder, again)
    said = again.stderr.read() + holder.stderr.read()
    assert "deadlock" not in said, said
    assert again.returncode == 0, said
    assert alive, said
    with psycopg.connect(pg_url) as conn:
        reviewed = conn.execute("SELECT key FROM jobs WHERE review = 1 ORDER BY key").fetchall()
    assert reviewed == [(key,) for key in sorted(order)]
