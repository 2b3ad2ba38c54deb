"""Outside audit 58e: an ``afc worker`` whose jobs of a batch were held at their probe, to
wait in its loop for that batch's storage (a failing store, for one look at it after
STORE_PAUSE_S; a multipart refusal, until a store of the batch in flight succeeds), counted
them as work in hand: the loop claims more only once no more than ``--concurrency`` of its
jobs are unfinished, and the held jobs, holding no slot, kept it above that. So its slots
stood idle and every other batch's jobs unclaimed for the whole wait (the pause; or as long
as the held batch's renders in flight lasted, a video's ten minutes). Now a job waiting so
is not counted as running. Through the real afc command: the fake Replicate
(tests/fakeproviders.py), moto's S3 server behind the fault proxy of tests/s3fake.py."""

from __future__ import annotations

import signal
import subprocess
import time

from s3fake import Fault
from test_output_spill import write

from afc_cli.pipeline import STORE_TRIES

WIDE = 2


def _b1_requests(s3) -> int:
    return sum("/films/b1/" in path for _, path in s3.plan.seen)


def _stored(afc) -> list:
    try:
        return afc.rows("SELECT key FROM jobs WHERE batch = 'b2' AND status = 'succeeded'")
    except Exception:  # the ledger busy a moment
        return []


def test_a_worker_claims_other_work_while_jobs_wait_for_their_batchs_storage(afc, fake, s3):
    """Every request on b1's keys answers 503: the first two probes spend their tries, and
    the worker's other jobs of b1 wait in its loop for one look at the storage after a pause.
    b2, admitted after b1 on a prefix that answers, is claimed, rendered and stored before
    that look (was: left unclaimed until the held jobs' wait had ended, after the look)."""
    write(afc, [f"small {i}" for i in range(12)])
    assert afc("submit", "manifest.yaml", "--storage", s3.url, "--no-run").returncode == 0
    write(afc, [f"other {i}" for i in range(4)], batch="b2")
    assert afc("submit", "manifest.yaml", "--storage", s3.url, "--no-run").returncode == 0
    s3.plan.add(Fault("*", r"/films/b1/", "slowdown", -1))
    worker = subprocess.Popen(
        afc.command("worker", "--concurrency", str(WIDE), "--claim", "8"),
        cwd=afc.cwd,
        env=afc.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        done: list = []
        for _ in range(4000):  # until b2 is stored (past the pause and its look, if held up)
            done = _stored(afc)
            if worker.poll() is not None or len(done) == 4:
                break
            time.sleep(0.02)
        looked = _b1_requests(s3)  # b1's requests by then
        worker.send_signal(signal.SIGTERM)
        stderr = worker.communicate(timeout=120)[1]
    finally:
        if worker.poll() is None:
            worker.kill()
    assert "Traceback" not in stderr
    assert len(done) == 4, (done, stderr)
    # stored while b1's held jobs waited: the storage not yet looked at again
    assert looked == WIDE * STORE_TRIES, (looked, stderr)
    assert fake.counts["replicate_submit"] == 4, "b1 rendered nothing it could not store"
    assert afc.rows("SELECT DISTINCT status, step FROM jobs WHERE batch = 'b1'") == [
        ("waiting", "probe")
    ]
