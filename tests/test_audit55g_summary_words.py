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
