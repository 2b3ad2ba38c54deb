"""Outside audit 60a: an ``afc worker`` under a policy without s3:PutObject rendered the whole
batch into its spool, a few rounds apart.

A refused upload holds the batch's later renders for the run that met it
(``RunContext.storage_denied``), and a run tries the uploads an earlier run left before it
probes their batch (``pipeline.note_stores_first``). But a worker's every round is a run of its
own: the jobs a refusal held rest ``STORE_PAUSE_S`` (30 s) and come back in a round of their
own, while the jobs whose upload was refused rest twice as long after each refusal. That
round knew of no refusal and had no upload to try first: it paid for ``--concurrency``
renders or more before its first upload was refused again. 20 jobs at 4 wide: 6 renders paid
by the submit, 8 more 60 s into the worker, the last 6 at 120 s; every upload refused.

Through the real afc command: the fake provider of tests/fakeproviders.py, moto's S3 server
behind the fault proxy of tests/s3fake.py refusing every upload (403 AccessDenied)."""

from __future__ import annotations

import signal
import subprocess
import time

from conftest import jobs, manifest
from s3fake import Fault
from test_s3 import submit

HOLDS = 3  # the submit's hold, then the worker's first two rounds of the held jobs


def _look(afc, sql: str) -> int:
    try:
        return afc.rows(sql)[0][0]
    except Exception:  # the ledger busy a moment
        return -1


def test_a_workers_later_rounds_pay_for_no_render_while_uploads_are_refused(afc, s3):
    afc.write_manifest(manifest(jobs(20, latency_s=0.3)))
    s3.plan.add(Fault("PUT", r"shot-", "403", -1))  # the policy lost s3:PutObject
    first = submit(afc, s3, "--concurrency", "4")
    assert first.returncode == 1, first.stderr
    spooled = _look(afc, "SELECT COUNT(*) FROM attempts")
    assert 4 <= spooled < 20, spooled
    worker = subprocess.Popen(
        afc.command("worker", "--concurrency", "4", "--poll", "0.2"),
        cwd=afc.cwd,
        env=afc.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    # until each job never rendered has been held again by the worker's rounds (each ends
    # its round waiting, one 'waiting' event a hold), or one more render is paid
    held_again = (
        "SELECT COUNT(*) FROM jobs j WHERE j.attempts = 0 AND (SELECT COUNT(*) FROM events e"
        f" WHERE e.job_id = j.id AND e.kind = 'waiting') < {HOLDS}"
    )
    try:
        paid = spooled
        for _ in range(3000):  # a guard: 300 s
            paid = _look(afc, "SELECT COUNT(*) FROM attempts")
            if worker.poll() is not None or paid > spooled or _look(afc, held_again) == 0:
                break
            time.sleep(0.1)
        worker.send_signal(signal.SIGTERM)
        stderr = worker.communicate(timeout=120)[1]
    finally:
        if worker.poll() is None:
            worker.kill()
    assert "Traceback" not in stderr
    assert paid == spooled, f"{paid - spooled} renders paid into a store refusing every upload"
    assert _look(afc, held_again) == 0, stderr[-3000:]
    # the uploads were tried again, and the batch's other jobs wait at their probe
    assert _look(afc, "SELECT MIN(store_failures) FROM jobs WHERE step = 'store'") >= 2
    assert _look(afc, "SELECT COUNT(*) FROM jobs WHERE step = 'probe'") == 20 - spooled
