"""A run's lease renewal beside a re-submit holding one of its jobs' rows, on a PostgreSQL
ledger (outside audit 58b): the renewal, one statement over every job the run holds,
waited for that row with the run's event loop stopped, and the leases of the rows after it
in its order ran out meanwhile."""

from __future__ import annotations

import signal
import time

import psycopg
from conftest import frozen_at, manifest, wait_for_ledger
from pg_stalls import SECRET, on_replicate, run_out_by, stop


def test_a_renewal_waiting_for_one_row_lets_no_other_lease_run_out(afc, fake, pg_url):
    """Host a's run holds two jobs whose OpenAI calls are in flight (AFC_LEASE_S=3). A
    re-submit moving the webhook of one of them (the first in the renewal's order) takes
    its row and stalls; the run's renewal, one statement over every job it holds, waits for
    that row before it reaches the other's, which it neither renewed nor locked. That
    lease ran out, and host c's resume took the job over and paid OpenAI for it a second
    time while host a's call was still in flight. Now the renewal renews the rows it can
    take at once and tries the held one again soon: host c finds the other job held by a
    live run and pays for nothing."""
    jobs = [{"key": key, "prompt": f"render {key} slow-12s"} for key in ("shot-a", "shot-b")]
    data = manifest(jobs)
    data["defaults"]["chain"] = [{"provider": "openai", "model": "gpt-image-1", "attempts": 1}]
    data["rates"] = [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.05"}]
    data["webhook"] = {"url": "http://127.0.0.1:9/hooks", "secret_env": "AFC_HOOK_SECRET"}
    afc.write_manifest(data)
    env = {"AFC_LEDGER": pg_url, "AFC_GRACE_S": "0", "AFC_HOOK_SECRET": SECRET}
    holder = afc.popen(
        "submit", "manifest.yaml", env={**env, "AFC_HOST_ID": "host-a", "AFC_LEASE_S": "3"}
    )
    again = taker = None
    try:
        wait_for_ledger(
            afc,
            pg_url,
            "SELECT COUNT(*) = 2 FROM attempts WHERE status = 'started'",
            proc=holder,
        )
        # the renewal meets the rows in their order in the table: the re-submit holds the first
        with psycopg.connect(pg_url) as conn:
            first = conn.execute("SELECT key FROM jobs ORDER BY ctid LIMIT 1").fetchone()[0]
        data["jobs"] = [job for job in jobs if job["key"] == first]
        data["webhook"] = {"url": "http://127.0.0.1:9/moved", "secret_env": "AFC_HOOK_SECRET"}
        afc.write_manifest(data, "again.yaml")
        again = afc.popen(
            "submit",
            "again.yaml",
            "--no-run",
            env={**env, "AFC_HOST_ID": "host-b", "AFC_STALL_POINT": "rewebhooked_one"},
        )
        frozen_at(again)
        # held past its lease: the renewal that waited for it had waited since before the
        # other job's lease ran out (both renewed together, every second)
        deadline = time.monotonic() + 60
        while run_out_by(pg_url, first) < 0.5:
            assert time.monotonic() < deadline, "the held job's lease never ran out"
            assert holder.poll() is None, holder.stderr.read()
            time.sleep(0.05)
        # another host, its clock the server's: the other job's lease ran out, or not
        taker = afc("resume", env={**env, "AFC_HOST_ID": "host-c"}, timeout=60)
        again.send_signal(signal.SIGCONT)
        assert again.wait(timeout=60) == 0, again.stderr.read()
        assert holder.wait(timeout=60) == 0, holder.stderr.read()
    finally:
        stop(holder, again)
    assert fake.counts["openai"] == 2, (taker.stdout, taker.stderr)


def test_a_resubmit_holding_a_runs_rows_past_their_lease_hands_the_jobs_to_nobody(
    afc, fake, pg_url
):
    """Host a's run holds two jobs waiting on Replicate (AFC_LEASE_S=3). A re-submit moving
    the batch's webhook takes both rows and stalls past their leases, which the run cannot
    renew while the rows are held. Woken, the re-submit commits and goes on to run the
    batch itself: it found both leases run out and took the jobs over from the live run
    (here host a is stopped a moment, its tries at its rows not first) and waited on their
    renders (with OpenAI, paying for them twice). Now the re-submit gives the leases the
    time it held them: its run leaves the jobs to host a."""
    jobs = [{"key": key, "prompt": f"hold render {key}"} for key in ("shot-a", "shot-b")]
    data = manifest(jobs)
    on_replicate(data)
    data["webhook"] = {"url": "http://127.0.0.1:9/hooks", "secret_env": "AFC_HOOK_SECRET"}
    afc.write_manifest(data)
    env = {"AFC_LEDGER": pg_url, "AFC_GRACE_S": "0", "AFC_HOOK_SECRET": SECRET}
    holder = afc.popen(
        "submit", "manifest.yaml", env={**env, "AFC_HOST_ID": "host-a", "AFC_LEASE_S": "3"}
    )
    again = None
    try:
        wait_for_ledger(
            afc,
            pg_url,
            "SELECT COUNT(*) = 2 FROM jobs WHERE status = 'waiting'"
            " AND waiting_reason LIKE 'provider still rendering%'",
            proc=holder,
        )
        data["webhook"] = {"url": "http://127.0.0.1:9/moved", "secret_env": "AFC_HOOK_SECRET"}
        afc.write_manifest(data, "again.yaml")
        again = afc.popen(
            "submit",
            "again.yaml",
            env={**env, "AFC_HOST_ID": "host-b", "AFC_STALL_POINT": "rewebhooked_one"},
        )
        frozen_at(again)  # both rows taken, one written
        deadline = time.monotonic() + 60
        while min(run_out_by(pg_url, key) for key in ("shot-a", "shot-b")) < 0.5:
            assert time.monotonic() < deadline, "the held jobs' leases never ran out"
            assert holder.poll() is None, holder.stderr.read()
            time.sleep(0.05)
        holder.send_signal(signal.SIGSTOP)
        frozen_at(holder)
        again.send_signal(signal.SIGCONT)
        again.wait(timeout=60)
        holder.send_signal(signal.SIGCONT)
        fake.released.set()
        assert holder.wait(timeout=60) == 0, holder.stderr.read()
    finally:
        stop(holder, again)
    said = again.stderr.read()
    assert "0 new, 2 replayed" in said, said
    assert fake.counts["replicate_submit"] == 2
