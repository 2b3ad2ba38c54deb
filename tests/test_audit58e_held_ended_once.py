"""Outside audit 58e: a job held at its probe for its batch's storage that waits in the run
(a multipart refusal, until a store of the batch succeeds; a failing store, until one look
at it) was told ended as it began to wait: a cron log or a script reading afc's plain
lines ('afc: batch/key: ended ...', README) read 'ended waiting' for jobs that then went on
and ended succeeded, two ends of one job, and the live panel counted each twice (its bar
past the total, 'left waiting' lines for jobs that were stored). Now such a job is told
waiting as it waits, and ended once, when it ends. Through the real afc command: the fake
Replicate (tests/fakeproviders.py), moto's S3 server behind the fault proxy of
tests/s3fake.py."""

from __future__ import annotations

import re
import subprocess
import time

from s3fake import Fault
from test_output_spill import write


def _parked(afc) -> list:
    try:
        return afc.rows("SELECT key FROM jobs WHERE status = 'waiting' AND step = 'probe'")
    except Exception:  # the submit has not made the ledger yet
        return []


def test_a_job_held_in_the_run_is_told_ended_once(afc, fake, s3):
    """j0's 70 MiB output is refused (its multipart upload's request: 501); j1 is held at the
    provider, so later jobs come to their probe under the refusal and wait in the run; then
    j1 is let go, its store succeeds, and they are rendered and stored. Each job's plain
    'ended' line is written once, saying how it ended (was: 'ended waiting', then 'ended
    succeeded', for each job held)."""
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
    assert "Traceback" not in stderr
    ends: dict[str, list[str]] = {}
    for key, how in re.findall(r"^afc: b1/(j\d+): ended (\S+)", stderr, re.M):
        ends.setdefault(key, []).append(how)
    statuses = dict(afc.rows("SELECT key, status FROM jobs"))
    assert statuses["j0"] == "waiting" and set(parked) <= {
        key for key, status in statuses.items() if status == "succeeded"
    }, (parked, statuses)
    assert ends == {key: [status] for key, status in statuses.items()}, (parked, stderr)
    assert fake.counts["replicate_submit"] == 8, "each rendered once"
