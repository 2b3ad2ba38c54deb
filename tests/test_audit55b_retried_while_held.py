"""Outside audit 55b (commands run against a ledger a run is using): what a run says of a job
a person cancelled and then retried while the run held it."""

from __future__ import annotations

import signal

from conftest import manifest, wait_for


def test_a_job_cancelled_and_retried_in_its_backoff_is_not_said_taken_over(afc):
    """The job waits out a backoff in 'afc submit' when a person cancels it and then retries
    it (here the run frozen meanwhile, so the two commands fall inside the wait on any
    machine). The run woke, found the job no longer its own and said 'taken over by another
    afc process, which goes on with it': no process held it, it was queued for the next run,
    and a person told another process had it did not run one. The run now says what
    happened, and renders nothing more for it."""
    calls = afc.cwd / "calls.log"
    data = manifest([{"key": "shot", "prompt": "a shot", "params": {"fail": ["server"]}}])
    # the injected failure's Retry-After is the backoff's floor: three seconds, not a draw
    data["defaults"]["chain"][0]["backoff"] = {"base": 3, "cap": 3}
    data["jobs"][0]["params"]["retry_after_s"] = 3
    afc.write_manifest(data)
    run = afc.popen("submit", "manifest.yaml", env={"AFC_LOCAL_CALL_LOG": str(calls)})
    try:
        wait_for(afc, "SELECT COUNT(*) FROM jobs WHERE status = 'waiting'", 1)
        run.send_signal(signal.SIGSTOP)
        assert afc("cancel", "shot").returncode == 0
        retried = afc("retry", "shot")
        assert retried.returncode == 0, retried.stderr
        run.send_signal(signal.SIGCONT)
        assert run.wait(timeout=60) == 1  # a job left unfinished
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    err = run.stderr.read()
    assert "b1/shot: ended here: cancelled and retried meanwhile" in err, err
    assert "taken over" not in err, err
    assert afc.rows("SELECT status, lease_owner FROM jobs") == [("queued", None)]
    assert len(calls.read_text().splitlines()) == 1  # no call after the cancel
