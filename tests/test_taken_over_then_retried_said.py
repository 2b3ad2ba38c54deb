"""What a run says of a job it held that another run took over and ended, and a person then
retried, all while the first run was stalled."""

from __future__ import annotations

import signal
import sqlite3

from conftest import manifest, stop_between_writes, wait_for


def test_a_job_taken_over_failed_and_retried_is_not_said_cancelled(afc):
    """The run waits out a backoff and stalls (SIGSTOP here; a laptop's lid, a VM paused in
    practice) past its lease; 'afc resume' takes the job over and its next attempt fails it;
    a person retries it. The woken run said 'cancelled and retried meanwhile ('afc cancel',
    then 'afc retry')': nobody cancelled it, and a person read the log looking for who had.
    It now says what the retry's event recorded: failed, then retried."""
    calls = afc.cwd / "calls.log"
    data = manifest(
        [{"key": "shot", "prompt": "a shot", "params": {"fail": ["server", "invalid"]}}]
    )
    data["defaults"]["chain"][0]["backoff"] = {"base": 3, "cap": 3}
    data["jobs"][0]["params"]["retry_after_s"] = 3
    afc.write_manifest(data)
    env = {"AFC_LOCAL_CALL_LOG": str(calls)}
    # the run as another machine's (AFC_HOST_ID): a live process of this one keeps its jobs
    run = afc.popen("submit", "manifest.yaml", env={**env, "AFC_HOST_ID": "host-a"})
    try:
        wait_for(afc, "SELECT COUNT(*) FROM jobs WHERE status = 'waiting'", 1)
        stop_between_writes(afc, run)
        conn = sqlite3.connect(afc.cwd / "afc.db")
        with conn:  # its lease expired while it was stopped
            conn.execute("UPDATE jobs SET lease_expires = 0")
        conn.close()
        resumed = afc("resume", env=env)
        assert resumed.returncode == 1, resumed.stderr
        assert afc.rows("SELECT status FROM jobs") == [("failed",)], resumed.stderr
        retried = afc("retry", "shot")
        assert retried.returncode == 0, retried.stderr
        run.send_signal(signal.SIGCONT)
        assert run.wait(timeout=60) == 1  # a job left unfinished
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    err = run.stderr.read()
    assert "cancelled" not in err, err
    assert "b1/shot: ended here: failed and retried meanwhile ('afc retry')" in err, err
    assert afc.rows("SELECT status, lease_owner FROM jobs") == [("queued", None)]
    assert len(calls.read_text().splitlines()) == 2  # the first run's call and the resume's
