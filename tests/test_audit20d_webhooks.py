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
