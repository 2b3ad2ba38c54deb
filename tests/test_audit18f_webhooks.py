"""Webhook delivery across interruptions and copies, found by outside audit 18: what a stopped
run still posts, what it leaves leased, and what a ledger copy says of the events in flight."""

from __future__ import annotations

import base64
import signal
import sqlite3
import threading
import time

from conftest import jobs, manifest
from receiver import Receiver
from test_s3 import moto_server, s3  # noqa: F401 - the S3 fixtures

SECRET = "whsec_" + base64.b64encode(b"afc test secret, 32 bytes long!!").decode()


def test_a_worker_stopped_before_its_loop_began_posts_no_event(afc, s3):  # noqa: F811
    """A worker sent SIGTERM while its round opened the storages (the bucket's HEAD: seconds
    on a slow link) started its run loop already draining, as README says: no job ran. But
    the loop's webhook drain, started after the stop was acted on, was never told of it: it
    went on posting every due event of the ledger, and once more after the jobs (up to 15 s,
    each POST up to its timeout_s, 120 s at most), so a worker told to stop went on talking
    to receivers for minutes (a container's grace period then kills it mid-POST). A stopped
    run posts nothing more: its events wait for the next run or 'afc webhooks deliver'."""
    receiver = Receiver().start()
    try:
        afc.env["AFC_HOOK_SECRET"] = SECRET
        hook = {"url": "http://127.0.0.1:9/down", "secret_env": "AFC_HOOK_SECRET"}
        afc.write_manifest(manifest(jobs(1), batch="b0", webhook=hook), "m0.yaml")
        assert afc("submit", "m0.yaml", "--storage", s3.url).returncode == 0
        # b0's event is pending (its receiver was down), due now at a receiver that answers
        with sqlite3.connect(afc.cwd / "afc.db") as conn:
            conn.execute("UPDATE deliveries SET url = ?, next_attempt_at = 0", (receiver.url,))
        afc.write_manifest(manifest(jobs(1), webhook={**hook, "url": receiver.url}))
        assert afc("submit", "manifest.yaml", "--no-run", "--storage", s3.url).returncode == 0

        stalled, release = threading.Event(), threading.Event()
        take = s3.plan.take

        def stall(method, path):  # the round's check of the bucket, before its loop
            if method == "HEAD" and path.rstrip("/").endswith(s3.bucket):
                stalled.set()
                release.wait(30)
            return take(method, path)

        s3.plan.take = stall
        worker = afc.popen("worker", "--poll", "0.2")
        try:
            assert stalled.wait(30), "the worker did not check the bucket"
            worker.send_signal(signal.SIGTERM)
            time.sleep(0.2)  # the worker's handler has set its stop
            release.set()
            code = worker.wait(timeout=60)
        finally:
            release.set()
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        err = worker.stderr.read()
        assert code == 0, err
        assert receiver.received == [], "a stopped worker posted events"
        assert afc.rows("SELECT status FROM jobs WHERE batch = 'b1'") == [("queued",)]
        assert afc.rows("SELECT status, lease_owner FROM deliveries") == [("pending", None)]
    finally:
        receiver.stop()
