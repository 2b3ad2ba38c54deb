"""Outside audit 55g: a run's pause of a reviewed job for a person's decision is fenced by
the run's lease on it, as its end of a job is (``Ledger.finish``)."""

from __future__ import annotations

import signal

from conftest import frozen_at, manifest


def test_a_stale_runs_review_pause_leaves_a_retried_job_to_the_run_that_took_it(afc):
    """Run A renders and reads back a job under review, and stalls just before pausing it
    for the review. A person cancels and retries the job; run B takes it (it finds A's
    output stored) and stalls at the same point. A wakes first: its pause overwrote B's
    job with 'awaiting_review' and no holder, and B's own pause then found the job
    no longer its to pause. A now stands back; B pauses the job."""
    data = manifest([{"key": "shot", "prompt": "a shot"}])
    data["defaults"]["review"] = True
    afc.write_manifest(data)
    first = afc.popen("submit", "manifest.yaml", env={"AFC_STALL_POINT": "reviewed"})
    second = None
    try:
        frozen_at(first)
        for command in ("cancel", "retry"):
            done = afc(command, "shot", "--batch", "b1")
            assert done.returncode == 0, done.stderr
        second = afc.popen("resume", env={"AFC_STALL_POINT": "reviewed"})
        frozen_at(second)
        held = afc.rows("SELECT status, lease_owner FROM jobs")
        assert held[0][1], "run B holds the retried job"
        first.send_signal(signal.SIGCONT)
        first.wait(timeout=60)
        # B still holds its job: A's pause wrote nothing
        assert afc.rows("SELECT status, lease_owner FROM jobs") == held
        second.send_signal(signal.SIGCONT)
        assert second.wait(timeout=60) == 0, second.stderr.read()
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait()
    assert afc.rows("SELECT status, lease_owner FROM jobs") == [("awaiting_review", None)]
    events = [kind for (kind,) in afc.rows("SELECT kind FROM events ORDER BY id")]
    assert events.count("awaiting_review") == 1, events  # B's alone
