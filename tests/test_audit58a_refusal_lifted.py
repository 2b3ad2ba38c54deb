"""Outside audit 58a, storage: after a store refused a large output's multipart upload, the
batch's jobs that came to their probe wait (afc cannot tell an output's size before paying
for its render), and a store of the batch that succeeds later in the run lifts the hold.
It lifted it only for the jobs that reached their probe after it: those that came before
were left for the next run, and as each held job gave its slot to the next at once, a
moment between the refusal and the next store parked most of the batch (a cron's next run,
an hour on; each time its large output was refused again). Now a held job waits in the run
for the jobs of its batch past their probe, and looks again once one's store succeeded.
Through the real afc command: the fake Replicate (tests/fakeproviders.py), moto's S3 server
behind the fault proxy of tests/s3fake.py."""

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


def submit_under_refusal(afc, fake, s3) -> tuple[set[str], str, int]:
    """j0's 70 MiB output is refused (its multipart upload's request: 501); j1, small, is
    held at the fake provider until later jobs wait at their probe under the refusal; then
    j1 is let go, and its store succeeds. The jobs seen waiting, the submit's stderr and its
    exit code (also tests/test_audit58e_held_ended_once.py)."""
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
    return parked, stderr, run.returncode


def test_jobs_held_by_a_multipart_refusal_go_on_once_a_later_store_succeeds(afc, fake, s3):
    """j0's 70 MiB output is refused (its multipart upload's request: 501); j1, small, is
    held at the provider meanwhile, so later jobs come to their probe under the refusal and
    wait; then j1 is let go, and its store succeeds. Those jobs waited for the next run, not
    rendered; now each is rendered and stored in this run, once. (Taken over from
    tests/test_audit57f_denial_lifted.py, which asserted the wait for the next run.)"""
    parked, stderr, returncode = submit_under_refusal(afc, fake, s3)
    assert parked, stderr
    assert "Traceback" not in stderr
    assert returncode == 1, stderr  # j0 waits at its store, its render kept
    assert afc.rows("SELECT status, step FROM jobs WHERE key = 'j0'") == [("waiting", "store")]
    rows = afc.rows("SELECT key, status, attempts, store_failures FROM jobs WHERE key != 'j0'")
    assert {(status, attempts, failures) for _, status, attempts, failures in rows} == {
        ("succeeded", 1, 0)
    }, (parked, rows)
    assert fake.counts["replicate_submit"] == 8, "each rendered once"
    s3.plan.clear()
    assert afc("resume").returncode == 0
    assert afc.rows("SELECT DISTINCT status FROM jobs") == [("succeeded",)]
    assert fake.counts["replicate_submit"] == 8, "j0 stored from its spool, not rendered again"
