"""Outside audit 55b (commands run against a ledger a run is using): what a run says of a job
a person cancelled and then retried while the run held it."""

from __future__ import annotations

import json
import signal
import subprocess

from conftest import manifest, stop_between_writes, wait_for


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
        stop_between_writes(afc, run)
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


def test_a_job_retried_and_ended_by_another_run_meanwhile_is_not_counted_here(afc):
    """The same cancel and retry, and then another run ('afc resume') renders the job and it
    succeeds, all before the worker that held it wakes from its backoff. That worker said
    'ended succeeded' and counted the job finished, as the run that rendered it did: two
    summaries for one job (a retry zeroes the takeover count by which a woken worker knows a
    job another process ended). Now it says that process ended it, and counts nothing."""
    data = manifest([{"key": "shot", "prompt": "a shot", "params": {"fail": ["server"]}}])
    data["defaults"]["chain"][0]["backoff"] = {"base": 3, "cap": 3}
    data["jobs"][0]["params"]["retry_after_s"] = 3
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    worker = subprocess.Popen(
        afc.command("worker", "--until-idle", "--poll", "0.1", "--json"),
        cwd=afc.cwd,
        env=afc.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(afc, "SELECT COUNT(*) FROM jobs WHERE status = 'waiting'", 1)
        stop_between_writes(afc, worker)
        assert afc("cancel", "shot").returncode == 0
        assert afc("retry", "shot").returncode == 0
        resumed = afc("resume")
        assert resumed.returncode == 0, resumed.stderr
        worker.send_signal(signal.SIGCONT)
        out, err = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert "b1/shot: ended here: cancelled and retried meanwhile, and another afc process" in err
    assert "b1/shot: ended succeeded" not in err, err
    assert json.loads(out)["finished"] == 0, err
