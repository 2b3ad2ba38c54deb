"""A job whose probe was an earlier run's looks at its storage again before it pays
(outside audit 28b)."""

from __future__ import annotations

from conftest import jobs, manifest


def test_a_job_stopped_by_the_budget_after_its_probe_looks_again_before_paying(afc):
    """One job is stopped by --max-spend after its probe found its key free: the ledger
    keeps it waiting at its render step, no attempt made. Another ledger sharing the
    storage then renders and stores it. The next resume paid for a render of an output
    already stored (the render step heads the key only for a job with attempts), then found
    the object at its store step: two renders paid for one output (with a provider whose
    bytes differ, or a request the other ledger admitted differently, a conflict at store)."""
    afc.write_manifest(manifest(jobs(2)))
    first = afc("submit", "manifest.yaml", "--max-spend", "0.05")
    assert first.returncode == 4, first.stderr
    [(key,)] = afc.rows("SELECT key FROM jobs WHERE status = 'waiting' AND step = 'render'")
    other = afc("submit", "manifest.yaml", "--ledger", "other.db")
    assert other.returncode == 0, other.stderr

    resumed = afc("resume", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert afc.rows("SELECT status FROM jobs WHERE key = ?", (key,)) == [("succeeded",)]
    # nothing paid: the resume found the other ledger's object, its render avoided
    assert afc.rows(
        "SELECT COUNT(*) FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE j.key = ?", (key,)
    ) == [(0,)]
    assert afc.rows(
        "SELECT COUNT(*) FROM avoided v JOIN jobs j ON j.id = v.job_id WHERE j.key = ?", (key,)
    ) == [(1,)]


def test_a_job_with_attempts_that_finds_another_request_stored_fails_before_paying(afc):
    """A job whose first attempt failed waits out its backoff when the run is stopped; another
    ledger sharing the storage then admits the key with another prompt and stores its render.
    The resume looked at the key (the job had attempts) and found that other request's
    object, yet paid for a render anyway, then failed IDEMPOTENCY_CONFLICT at its store: a
    render paid for nothing. It fails there before paying, as its probe would have."""
    import signal

    from conftest import wait_for

    first = {"key": "shot-001", "prompt": "first", "params": {"fail": ["rate_limited"],
             "retry_after_s": 60}}  # fmt: skip
    afc.write_manifest(manifest([first]))
    proc = afc.popen("submit", "manifest.yaml")
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE status = 'failed'", 1)
        wait_for(afc, "SELECT COUNT(*) FROM jobs WHERE status = 'waiting'", 1)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert afc.rows("SELECT step, attempts FROM jobs") == [("render", 1)]
    afc.write_manifest(manifest([{"key": "shot-001", "prompt": "changed"}]), "other.yaml")
    other = afc("submit", "other.yaml", "--ledger", "other.db")
    assert other.returncode == 0, other.stderr

    resumed = afc("resume")
    assert resumed.returncode == 3, resumed.stderr
    assert afc.rows("SELECT status, error_code FROM jobs") == [("failed", "IDEMPOTENCY_CONFLICT")]
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(1,)]  # nothing paid again
