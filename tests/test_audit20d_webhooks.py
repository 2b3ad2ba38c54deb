"""Webhook deliveries across a clean stop, found by outside audit 20d: what a SIGTERM leaves
of the POST it cut short."""

from __future__ import annotations

import base64
import signal
import sqlite3
import threading
import time

import pytest
from conftest import jobs, manifest
from receiver import Receiver

SECRET = "whsec_" + base64.b64encode(b"afc test secret, 32 bytes long!!").decode()


@pytest.mark.parametrize(
    ("command", "code"),
    [(("webhooks", "deliver"), 130), (("resume",), 130), (("worker", "--poll", "0.2"), 0)],
    ids=["deliver", "resume", "idle-worker"],
)
def test_a_post_cut_short_by_a_stop_is_released_for_the_next_run(afc, command, code):
    """A SIGTERM (a cron job's ``timeout``, a container stopped) while a POST waited for its
        receiver's answer ended the process with exit 130 and 'its events pending', as README
        says, but the row of that POST stayed leased to the stopped process for its timeout_s
        plus 120 s: the next 'afc webhooks deliver' or run, a minute later from cron, skipped it
        as if someone were still posting it. A POST a stop cut short is given back at once, in
        its place and with its tries unchanged (whether the receiver got it is unknown: at least
        once, the same webhook-id). An idle worker giving way to a job keeps it leased, as before
    (tests/test_worker_idle.py): it goes on, and would post it again at once."""
    receiver = Receiver().start()
    receiver.gate = threading.Event()  # every POST held unanswered
    try:
        afc.env["AFC_HOOK_SECRET"] = SECRET
        hook = {"url": "http://127.0.0.1:9/down", "secret_env": "AFC_HOOK_SECRET"}
        afc.write_manifest(manifest(jobs(1), webhook={**hook, "timeout_s": 60}))
        assert afc("submit", "manifest.yaml").returncode == 0
        with sqlite3.connect(afc.cwd / "afc.db") as conn:  # due now, at a receiver that holds it
            conn.execute("UPDATE deliveries SET url = ?, next_attempt_at = 0", (receiver.url,))
        before = afc.rows("SELECT attempts FROM deliveries")
        proc = afc.popen(*command)
        try:
            deadline = time.monotonic() + 30
            while not receiver.received and time.monotonic() < deadline:
                time.sleep(0.05)
            assert receiver.received, "the delivery was not posted"
            proc.send_signal(signal.SIGTERM)
            ended = proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        err = proc.stderr.read()
        assert ended == code, err  # a worker's stop is its normal end
        assert "Traceback" not in err
        assert afc.rows("SELECT status, lease_owner, lease_expires FROM deliveries") == [
            ("pending", None, None)
        ]
        assert afc.rows("SELECT attempts FROM deliveries") == before
    finally:
        receiver.stop()


def test_a_jobs_events_carry_the_moment_they_happened_to_order_them_by(afc):
    """Events of one job can reach a receiver out of order: a job.awaiting_review whose first
    POST failed is retried after its backoff, while the job.succeeded of the approval that
    followed is due at once. Standard Webhooks leaves ordering to the receiver, by the
    envelope's ``timestamp``, which afc wrote in whole seconds: a review approved by a script
    within the second of the pause gave both events one timestamp, and a receiver could not
    tell which came last (it showed the job awaiting review for good). The timestamp is the
    event's moment to the microsecond, as Standard Webhooks' own examples have it."""
    import datetime as dt
    import json

    afc.env["AFC_HOOK_SECRET"] = SECRET
    hook = {"url": "http://127.0.0.1:9/down", "secret_env": "AFC_HOOK_SECRET"}
    data = manifest(jobs(1), webhook=hook)
    data["defaults"]["review"] = True
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    assert afc("review", "approve", "shot-001").returncode == 0
    rows = afc.rows("SELECT event, envelope, created_at FROM deliveries ORDER BY created_at")
    assert [event for event, _, _ in rows] == ["job.awaiting_review", "job.succeeded"]
    stamps = []
    for _, envelope, created_at in rows:
        stamp = json.loads(envelope)["timestamp"]
        assert stamp.endswith("Z"), stamp
        moment = dt.datetime.fromisoformat(stamp).timestamp()
        assert abs(moment - created_at) < 1e-3, (stamp, created_at)
        stamps.append(moment)
    assert stamps[0] < stamps[1]
