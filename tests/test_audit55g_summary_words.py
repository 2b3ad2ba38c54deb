"""Outside audit 55g: the words a run's summary says of a job."""

from __future__ import annotations

import signal

from conftest import frozen_at, manifest

RATES = [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}]


def test_a_job_released_with_a_possibly_paid_call_is_not_said_not_started(afc, fake):
    """A run abandons a job's call in flight (two signals): its attempt is recorded unknown,
    possibly paid, and the job goes back to the queue. A later submit's summary said of it
    'queued at render: not started', as if nothing had been paid for it; it now says it has
    an attempt of unknown cost."""
    data = manifest([{"key": "shot", "prompt": "a shot"}], rates=RATES)
    data["defaults"]["chain"] = [{"provider": "openai", "model": "gpt-image-1"}]
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml", env={"AFC_STALL_POINT": "after_attempt_row"})
    try:
        frozen_at(proc)
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGCONT)
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert afc.rows("SELECT status FROM attempts") == [("unknown",)]
    again = afc("submit", "manifest.yaml", "--no-run")
    assert again.returncode == 0, again.stderr
    (line,) = [x for x in again.stderr.splitlines() if x.startswith("afc: b1/shot:")]
    assert "not started" not in line, line
    assert "an attempt of unknown cost (possibly paid" in line, line


def test_a_conflict_on_a_job_with_no_output_says_no_output_is_untouched(afc):
    """A re-submit that changes the prompt of a job admitted but not rendered yet (or failed
    before its store) said 'The stored job and its output are untouched': there is no
    output, and a person looking for it finds none."""
    data = manifest([{"key": "shot", "prompt": "a shot"}])
    afc.write_manifest(data)
    first = afc("submit", "manifest.yaml", "--no-run")
    assert first.returncode == 0, first.stderr
    data["jobs"][0]["prompt"] = "another shot"
    afc.write_manifest(data)
    again = afc("submit", "manifest.yaml", "--no-run")
    assert "IDEMPOTENCY_CONFLICT" in again.stderr, again.stderr
    assert "its output" not in again.stderr, again.stderr
    assert "The stored job is untouched" in again.stderr, again.stderr


def test_a_workers_line_says_a_job_cancelled_while_it_held_it_cancelled(afc):
    """A person cancels a job an 'afc worker' holds (here frozen just after the job's attempt
    row); the other job succeeds. The worker's line said '2 finished (1 failed)' of a batch
    in which nothing failed."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}, {"key": "b", "prompt": "q"}]))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    proc = afc.popen(
        "worker",
        "--until-idle",
        "--concurrency",
        "1",
        env={"AFC_STALL_POINT": "after_attempt_row"},
    )
    try:
        frozen_at(proc)
        # the first job's attempt row, in admission order
        assert afc.rows("SELECT j.key FROM attempts a JOIN jobs j ON j.id = a.job_id") == [("a",)]
        assert afc("cancel", "a", "--batch", "b1").returncode == 0
        proc.send_signal(signal.SIGCONT)
        frozen_at(proc)  # the other job's attempt row
        proc.send_signal(signal.SIGCONT)
        assert proc.wait(timeout=60) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read()
    assert sorted(afc.rows("SELECT status FROM jobs")) == [("cancelled",), ("succeeded",)]
    assert "2 finished (1 cancelled);" in err, err
