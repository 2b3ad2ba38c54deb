"""A run stopped by a signal lets calls in flight finish (its grace period). A job whose call
then failed and whose chain that attempt ended was left ``queued``: ``afc status`` and the
stopped run's summary showed it as work to do, and only the next run failed it, calling
nothing. It is failed (``CHAIN_FAILED``) as the call ends, by the run that made it; a job with
attempts left stays queued for the next run, which calls again."""

from __future__ import annotations

import signal

from conftest import manifest, wait_for


def test_a_job_whose_last_attempt_failed_in_the_grace_period_ends_failed(afc, tmp_path):
    release = tmp_path / "release"
    data = manifest(
        [
            {"key": "over", "prompt": "p1", "params": {"fail": ["server"]}},
            {
                "key": "again",
                "prompt": "p2",
                "params": {"fail": ["server"]},
                "chain": [{"provider": "local", "model": "m1", "attempts": 2}],
            },
        ]
    )
    data["defaults"]["chain"] = [{"provider": "local", "model": "m1", "attempts": 1}]
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml", env={"AFC_LOCAL_RELEASE": str(release)})
    wait_for(afc, "SELECT COUNT(*) FROM attempts", 2)  # both calls held in flight
    proc.send_signal(signal.SIGTERM)
    release.touch()  # both fail (injected 5xx) within the grace period
    code = proc.wait(timeout=60)
    err = proc.stderr.read()
    assert code == 130, err
    jobs = dict(afc.rows("SELECT key, status || ' ' || COALESCE(error_code, '') FROM jobs"))
    assert jobs == {"over": "failed CHAIN_FAILED", "again": "queued "}, (jobs, err)
    assert afc.rows("SELECT COUNT(*) FROM attempts")[0][0] == 2
    assert "1 left to do" in err, err

    # the next run calls again for the job with an attempt left, and not for the failed one
    result = afc("resume")
    assert result.returncode == 1, result.stderr  # 'over' failed
    jobs = dict(afc.rows("SELECT key, status FROM jobs"))
    assert jobs == {"over": "failed", "again": "succeeded"}, jobs
    assert afc.rows("SELECT COUNT(*) FROM attempts")[0][0] == 3
