"""Outside audit 57f, storage: after a store refused a large output's multipart upload, the
batch's jobs that come to their probe in that run wait for the next one (afc cannot tell an
output's size before paying for its render), and say so. Through the real afc command: the
fake Replicate (tests/fakeproviders.py), moto's S3 server behind the fault proxy of
tests/s3fake.py."""

from __future__ import annotations

import subprocess
import time

from s3fake import Fault
from test_output_spill import write


def _parked(afc) -> list:
    try:
        return afc.rows("SELECT key FROM jobs WHERE status = 'waiting' AND step = 'probe'")
    except Exception:  # the submit has not made the ledger yet
        return []


def test_a_job_held_by_a_large_outputs_refusal_is_not_promised_a_store_lets_it_on(afc, fake, s3):
    """j0's 70 MiB output is refused (its multipart upload's request: 501); j1, small, is
    held at the provider meanwhile, so a later job comes to its probe under the refusal and
    waits; then j1 is let go, and its store succeeds. The waiting job's reason said 'a store
    of the batch that succeeds meanwhile lets its renders go on', and it did not: it waited,
    as it still does, for the next run, the submit ending with it waiting (exit 1). It now
    says it waits for the next run whatever a store does meanwhile."""
    write(afc, ["big-out-70 first", "small hold one", *(f"small {i}" for i in range(2, 8))])
    s3.plan.add(Fault("POST", r"/films/.*\?uploads", "notimplemented", -1))
    run = subprocess.Popen(
        afc.command("submit", "manifest.yaml", "--storage", s3.url, "--concurrency", "2"),
        cwd=afc.cwd,
        env=afc.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(3000):  # until a job waits under the refusal (a minute at most)
            if run.poll() is not None or _parked(afc):
                break
            time.sleep(0.02)
        parked = {key for (key,) in _parked(afc)}
        fake.released.set()  # j1's render ends, and its store succeeds
        stderr = run.communicate(timeout=120)[1]
    finally:
        if run.poll() is None:
            run.kill()
    assert parked, stderr
    assert run.returncode == 1, stderr
    assert afc.rows("SELECT status FROM jobs WHERE key = 'j1'") == [("succeeded",)]
    for key in parked:  # still waiting at their probe, for the next run
        [(status, reason)] = afc.rows(
            "SELECT status, waiting_reason FROM jobs WHERE key = ?", (key,)
        )
        assert status == "waiting"
        assert "lets its renders go on" not in reason, reason
        assert "this job waits for the next run" in reason, reason
    s3.plan.clear()
    assert afc("resume").returncode == 0
    assert afc.rows("SELECT DISTINCT status FROM jobs") == [("succeeded",)]
