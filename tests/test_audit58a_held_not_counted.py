"""Outside audit 58a, storage: a job held at its probe by ANOTHER job's refused upload (a
store that refuses a large output's multipart upload, or an upload refused 403) makes no
request of its own and pays for nothing. It counted that hold as one of its own storage
failures all the same, so after MAX_STORE_REQUEUES runs of one large output being refused,
the batch's never-rendered jobs were dead-lettered STORE_FAILED beside it, each needing a
person's 'afc retry'. Through the real afc command: the fake Replicate
(tests/fakeproviders.py), moto's S3 server behind the fault proxy of tests/s3fake.py."""

from __future__ import annotations

import sqlite3
import time

from s3fake import Fault
from test_output_spill import write

from afc_cli.pipeline import MAX_STORE_REQUEUES


def _refused(s3) -> bool:
    return any(kind == "notimplemented" for _, _, kind in s3.plan.injected)


def test_a_job_held_by_another_jobs_refused_upload_is_not_dead_lettered(afc, fake, s3):
    """j0's 70 MiB output is refused (its multipart upload's request: 501). j1, small, is held
    at the fake provider until that refusal, and its own upload is then refused 403, so no
    store of the batch succeeds in the run. j2..j4 come to their probe after the refusal and
    wait, nothing rendered: as in each of the runs before (their count set as four such runs
    left it), and the fifth dead-lettered them STORE_FAILED, never rendered, never stored."""
    write(afc, ["big-out-70 first", "small hold one", "small two", "small three", "small four"])
    assert afc("submit", "manifest.yaml", "--storage", s3.url, "--no-run").returncode == 0
    earlier = MAX_STORE_REQUEUES - 1
    with sqlite3.connect(afc.cwd / "afc.db") as conn:
        conn.execute(
            "UPDATE jobs SET store_failures = ? WHERE key IN ('j2', 'j3', 'j4')", (earlier,)
        )
    s3.plan.add(
        Fault("POST", r"/films/.*\?uploads", "notimplemented", -1),
        Fault("PUT", r"/films/.*j1\.png", "403", -1),
    )
    run = afc.popen("resume", "--concurrency", "1")
    try:
        for _ in range(3000):  # until j0's upload is refused (a minute at most)
            if run.poll() is not None or _refused(s3):
                break
            time.sleep(0.02)
        assert _refused(s3)
        fake.released.set()  # j1's render ends; its own upload is refused
        stderr = run.communicate(timeout=120)[1]
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 1, stderr
    assert "Traceback" not in stderr
    for key in ("j2", "j3", "j4"):
        [(status, step, failures, attempts)] = afc.rows(
            "SELECT status, step, store_failures, attempts FROM jobs WHERE key = ?", (key,)
        )
        assert (status, step, attempts) == ("waiting", "probe", 0), (key, status, stderr)
        assert failures == earlier, "a hold by another job's refusal is not its own failure"
    # the refused jobs' own failures are counted
    assert afc.rows(
        "SELECT key, store_failures FROM jobs WHERE key IN ('j0', 'j1') ORDER BY key"
    ) == [
        ("j0", 1),
        ("j1", 1),
    ]
    s3.plan.clear()
    assert afc("resume").returncode == 0
    assert afc.rows("SELECT DISTINCT status FROM jobs") == [("succeeded",)]
    assert fake.counts["replicate_submit"] == 5, "each rendered once"
