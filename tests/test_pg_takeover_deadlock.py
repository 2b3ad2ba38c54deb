"""A host stalled past its lease, woken while another host takes its job over, on a PostgreSQL
ledger: the two transactions met in opposite orders and PostgreSQL broke the deadlock by
failing one (seed 145 of bench/chaos.py: a worker stopped, exit 1, 'deadlock detected')."""

from __future__ import annotations

import signal
import time

import psycopg
import pytest
from conftest import frozen_at, manifest, wait_for_ledger


def _lock_waits(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock'"
        ).fetchone()[0]


@pytest.mark.parametrize("taking", ["resume", "cancel"])
def test_a_takeover_meeting_the_stalled_holders_write_is_no_deadlock(afc, fake, pg_url, taking):
    """Host a's run records Replicate's answer (a refusal): the attempt's row, then (same
    transaction) the job's, and stalls between the two (a SIGSTOP here; a paused VM, a swap storm in
    life) past its lease. Host b's 'afc resume' takes the job over: it locked the job's row,
    then waited to mark host a's attempt unknown; woken, host a's transaction waited for the
    job's row: a deadlock, one of the two failed by PostgreSQL. The takeover now finds the
    attempt being written and leaves the job to its holder, which lives: no deadlock, the
    job ends under host a (failed: its one attempt refused), one request made. A person's
    'afc cancel' met it the same way, marking the attempt unknown after the job's row: it
    now leaves the attempt to the run writing it, and the job is cancelled."""
    # refused by the provider's safety check once it is let go ("flagged"): an answer that
    # ends the attempt (its row), and the job, waiting on it, is the run's again (its row)
    data = manifest([{"key": "shot", "prompt": "hold render flagged"}])
    data["defaults"]["chain"] = [{"provider": "replicate", "model": "owner/model", "attempts": 1}]
    data["rates"] = [{"provider": "replicate", "model": "owner/model", "per_image": "0.05"}]
    afc.write_manifest(data)
    env = {"AFC_LEDGER": pg_url, "AFC_GRACE_S": "0"}
    holder = afc.popen(
        "submit",
        "manifest.yaml",
        env={
            **env,
            "AFC_HOST_ID": "host-a",
            "AFC_STALL_POINT": "answer_coming,answer_recorded",
        },
    )
    taker = None
    try:
        wait_for_ledger(
            afc,
            pg_url,
            "SELECT COUNT(*) FROM jobs WHERE status = 'waiting'"
            " AND waiting_reason LIKE 'provider still rendering%'",
            proc=holder,
        )
        fake.released.set()
        frozen_at(holder)  # its changes so far committed
        holder.send_signal(signal.SIGCONT)
        time.sleep(0.2)  # (a moment to leave its first stop: /proc says 'T' until it does)
        frozen_at(holder)  # the attempt's row written, its job's not yet
        with psycopg.connect(pg_url, autocommit=True) as conn:  # its lease ran out meanwhile
            conn.execute("SET lock_timeout = '5s'")
            conn.execute("UPDATE jobs SET lease_expires = 0")
        args = ("resume",) if taking == "resume" else ("cancel", "shot")
        taker = afc.popen(*args, env={**env, "AFC_HOST_ID": "host-b"})
        # the takeover waits on host a's lock (before), or has left the job to it (now)
        deadline = time.monotonic() + 60
        while taker.poll() is None and not _lock_waits(pg_url):
            assert time.monotonic() < deadline, "the takeover neither waited nor ended"
            time.sleep(0.05)
        holder.send_signal(signal.SIGCONT)
        assert holder.wait(timeout=60) == 1, holder.stderr.read()  # its job failed or cancelled
        taker.wait(timeout=60)
    finally:
        for proc in (holder, taker):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait()
    said = holder.stderr.read() + taker.stderr.read()
    assert "deadlock" not in said, said
    ended = "failed" if taking == "resume" else "cancelled"
    # the resume left it to the run holding it (1); the cancel cancelled it (0)
    assert taker.returncode == (1 if taking == "resume" else 0), said
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT status FROM jobs").fetchall() == [(ended,)]
        # its answer recorded by the run that had it, not marked unknown
        assert conn.execute("SELECT status FROM attempts").fetchall() == [("failed",)]
    assert fake.counts["replicate_submit"] == 1
