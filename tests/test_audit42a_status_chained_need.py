"""'afc status' of a blocked job whose need failed *itself* with DEPENDENCY_FAILED (a chain
style -> mid -> shot whose style failed, and 'afc retry shot' alone) told to "'afc retry mid'",
which puts mid back blocked behind the style that still failed: the next run failed both
again, and 'afc status' said the same. As the job's own DEPENDENCY_FAILED message and 'afc
retry' say, the retry that runs it is the one of the job that ended badly."""

from __future__ import annotations

from conftest import manifest


def test_a_blocked_job_whose_need_is_itself_dependency_failed_is_told_whose_retry_runs_it(afc):
    afc.write_manifest(
        manifest(
            [
                {"key": "style", "prompt": "s", "params": {"fail": ["auth"]}},
                {"key": "mid", "prompt": "m", "needs": ["style"]},
                {"key": "shot", "prompt": "x", "needs": ["mid"]},
            ]
        )
    )
    assert afc("submit", "manifest.yaml").returncode == 1
    assert afc("retry", "shot").returncode == 0
    (job,) = afc.json("status", "--status", "blocked")["jobs"]
    assert job["key"] == "shot"
    assert "'afc retry mid' lets it run" not in job["waiting"], job["waiting"]
    assert job["waiting"] == (
        "its need 'mid' ended failed, itself DEPENDENCY_FAILED: the next run fails it"
        " (DEPENDENCY_FAILED); a retry of the job that ended badly ('afc show mid' names it)"
        " puts 'mid' and this job back"
    )
    # as said: the retry of the job that ended badly runs it
    assert afc("retry", "style").returncode == 0
    afc("resume")
    statuses = dict(afc.rows("SELECT key, status FROM jobs"))
    assert statuses["mid"] == statuses["shot"] == "succeeded"
