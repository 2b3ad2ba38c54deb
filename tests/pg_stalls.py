"""What the PostgreSQL tests of a run beside a stalled re-submit, cancel or replay share
(tests/test_audit56g_*, test_audit57a_*, test_audit57e_*, test_audit58b_*): their jobs held
on the fake Replicate, their looks at the server's lock waits and at a run's leases, and the
waking and stopping of the processes they froze."""

from __future__ import annotations

import base64
import signal
import subprocess
import time
from typing import Any

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


# the webhook secret these tests sign with (AFC_HOOK_SECRET)
SECRET = "whsec_" + base64.b64encode(b"afc audit secret, 32 bytes long!").decode()


def on_replicate(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a manifest) rendering on the fake Replicate, one attempt a job: a prompt
    saying "hold" waits there, its prediction polled, until the test releases it."""
    data["defaults"]["chain"] = [{"provider": "replicate", "model": "owner/model", "attempts": 1}]
    data["rates"] = [{"provider": "replicate", "model": "owner/model", "per_image": "0.05"}]
    return data


def lock_waits(url: str, *, trying: bool = False) -> int:
    """Sessions waiting for a lock; ``trying``: or trying for rows held (``_lock_together``)."""
    also = " OR query LIKE '%afc_together%'" if trying else ""
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()"
            f" AND (wait_event_type = 'Lock'{also}) AND pid <> pg_backend_pid()"
        ).fetchone()[0]


def wake_until_ended(proc: subprocess.Popen, what: str, timeout: float = 120) -> None:
    """SIGCONT ``proc`` until it ends: it freezes again at each later pass of its stall point
    (a later round or chunk)."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        assert time.monotonic() < deadline, f"the {what} never ended"
        proc.send_signal(signal.SIGCONT)
        time.sleep(0.05)


def stop(*procs: subprocess.Popen | None) -> None:
    """End the test's processes still running, frozen ones too."""
    for proc in procs:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait()
