"""Outside audit 56e, storage: a store that wants multipart parts larger than afc's 16 MiB
refuses each multipart upload's completion ``EntityTooSmall`` (a 400), for every output over
64 MiB, whatever a retry does. Through the real afc command: 70 MiB renders from the fake
Replicate (tests/fakeproviders.py), moto's S3 server behind the fault proxy of
tests/s3fake.py."""

from __future__ import annotations

import subprocess
import time

from s3fake import Fault
from test_output_spill import write


def test_parts_too_small_for_the_store_stop_the_batchs_renders(afc, fake, s3):
    """Each refused completion was a 4xx of that one upload: the job waited in store with
    its render kept, and every next job of the batch was rendered (paid) and refused the
    same way, each large output paid for with no way to store it. A refusal no retry mends,
    as a refused multipart request is (tests/test_audit56d_multipart_refused.py): no other
    job of the batch is rendered in that run, the message naming the part size. The second
    job's render is held at the provider until the first completion was refused, so the
    run's order is fixed: before, all four were rendered; now the two already paid for."""
    write(afc, ["big-out-70 first", *(f"big-out-70 hold shot {i}" for i in range(3))])
    s3.plan.add(Fault("POST", r"/films/.*\?uploadId=", "toosmall", -1))
    run = subprocess.Popen(
        afc.command("submit", "manifest.yaml", "--storage", s3.url, "--concurrency", "1"),
        cwd=afc.cwd,
        env=afc.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(3000):  # until the first completion is refused (a minute at most)
            if any(kind == "toosmall" for _, _, kind in s3.plan.injected) or run.poll():
                break
            time.sleep(0.02)
        fake.released.set()  # the held render ends
        stderr = run.communicate(timeout=120)[1]
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 1, stderr
    assert "Traceback" not in stderr
    assert fake.counts["replicate_submit"] == 2, stderr
    rows = dict(afc.rows("SELECT step, COUNT(*) FROM jobs GROUP BY step"))
    assert rows == {"store": 2, "probe": 2}, rows
    reasons = {r for (r,) in afc.rows("SELECT waiting_reason FROM jobs")}
    assert all("parts larger than afc's 16 MiB" in reason for reason in reasons), reasons
    s3.plan.clear()  # the store's setting changed: it takes them
    assert afc("resume").returncode == 0
    assert afc.rows("SELECT DISTINCT status FROM jobs") == [("succeeded",)]
    assert fake.counts["replicate_submit"] == 4, "each rendered once"


def test_a_small_output_held_back_by_a_large_ones_refusal_is_told_why(afc, fake, s3):
    """After a store refused a multipart upload's request (an output over 64 MiB), the batch's
    next job is not rendered in that run, as after any refusal no retry mends: its output may
    be as large, a render paid for and refused. Its reason said 'its upload would be refused
    as well', of a job whose output, smaller, would have gone up in one request the store
    takes. The large renders of the batch are held at the provider until the first upload
    was refused, so the run's order is fixed."""
    write(afc, ["big-out-70 first", "big-out-70 hold second", "small third"])
    s3.plan.add(Fault("POST", r"/films/.*\?uploads", "notimplemented", -1))
    run = subprocess.Popen(
        afc.command("submit", "manifest.yaml", "--storage", s3.url, "--concurrency", "1"),
        cwd=afc.cwd,
        env=afc.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(3000):  # until the first multipart upload is refused (a minute at most)
            if any(kind == "notimplemented" for _, _, kind in s3.plan.injected) or run.poll():
                break
            time.sleep(0.02)
        fake.released.set()  # the held render ends
        stderr = run.communicate(timeout=120)[1]
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 1, stderr
    assert fake.counts["replicate_submit"] == 2, stderr
    [(reason,)] = afc.rows("SELECT waiting_reason FROM jobs WHERE key = 'j2'")
    assert "would be refused as well" not in reason, reason
    assert "its output may be over the size that makes a multipart upload" in reason, reason
