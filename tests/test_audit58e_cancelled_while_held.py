"""Outside audit 58e: a job held at its probe for its batch's failing storage waits in the
run for one look at it, its lease given back meanwhile. A person who cancelled it during
that wait read, once the run looked again, 'ended here: left to another afc process' (no
other process existed), and the summary's 'N run here' left it out while counting it
cancelled. Now it is told ended cancelled, and counted as run here. Through the real afc
command: the fake Replicate (tests/fakeproviders.py), moto's S3 server behind the fault
proxy of tests/s3fake.py."""

from __future__ import annotations

import subprocess
import time

from s3fake import Fault
from test_output_spill import write

JOBS = 4


def _held(afc) -> list:
    try:
        return afc.rows(
            "SELECT key FROM jobs WHERE status = 'waiting' AND waiting_reason LIKE '%one look%'"
        )
    except Exception:  # the submit has not made the ledger yet
        return []


def test_a_job_cancelled_while_it_waits_in_the_run_is_said_cancelled(afc, fake, s3):
    write(afc, [f"small {i}" for i in range(JOBS)])
    s3.plan.add(Fault("*", r"/films/", "slowdown", -1))
    run = subprocess.Popen(
        afc.command("submit", "manifest.yaml", "--storage", s3.url, "--concurrency", "2"),
        cwd=afc.cwd,
        env=afc.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(3000):  # until a job waits in the run for the look (a minute at most)
            if run.poll() is not None or _held(afc):
                break
            time.sleep(0.02)
        held = sorted(key for (key,) in _held(afc))
        assert held, "no job waited in the run"
        assert afc("cancel", held[0], "--batch", "b1").returncode == 0
        stderr = run.communicate(timeout=120)[1]
    finally:
        if run.poll() is None:
            run.kill()
    assert "Traceback" not in stderr
    assert f"afc: b1/{held[0]}: ended cancelled" in stderr, stderr
    assert "left to another afc process" not in stderr, stderr
    assert f"afc: {JOBS} run here;" in stderr, stderr
    assert fake.counts["replicate_submit"] == 0
