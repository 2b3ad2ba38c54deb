"""README ("Review gates", "Job statuses"): 'afc retry' of a dependent alone, its need still
ended badly, puts it back to ``blocked`` and the next run fails it again at once. 'afc status'
then said the job was "waiting for 1 need: style", as if the rejected style frame could still
succeed: a producer waited for a job that is final. It names the need's end and what the next
run does, as 'afc show' ("needs style (rejected)") and the retry do."""

from __future__ import annotations

from conftest import manifest


def test_a_blocked_job_whose_need_ended_badly_does_not_say_it_waits_for_it(afc):
    afc.write_manifest(
        manifest(
            [
                {"key": "style", "prompt": "a style frame", "review": True},
                {"key": "other", "prompt": "another frame", "review": True},
                {"key": "shot", "prompt": "a shot", "needs": ["style", "other"]},
                {"key": "title", "prompt": "a title", "needs": ["shot"]},
            ]
        )
    )
    assert afc("submit", "manifest.yaml").returncode == 0
    assert afc("review", "reject", "style", "--reason", "too dark").returncode == 0
    assert afc("retry", "shot").returncode == 0

    jobs = {job["key"]: job for job in afc.json("status")["jobs"]}
    assert jobs["shot"]["status"] == "blocked"
    assert jobs["shot"]["waiting"] == (
        "its need 'style' ended rejected: the next run fails it (DEPENDENCY_FAILED); a"
        " rejected job is final"
    )
    # a need still to come is said as before
    assert jobs["title"]["waiting"] == "waiting for 1 need: shot"
    rows = afc("status").stdout.splitlines()
    (shot,) = [line.split("\t") for line in rows if line.startswith("shot\t")]
    assert "ended rejected" in shot[rows[0].split("\t").index("reason")], rows
    # as said: the next run fails it, though its other need still awaits review
    afc("resume")
    assert dict(afc.rows("SELECT key, status FROM jobs"))["shot"] == "failed"


def test_a_blocked_job_whose_need_failed_is_told_to_retry_it(afc):
    afc.write_manifest(
        manifest(
            [
                {"key": "a", "prompt": "a", "params": {"fail": ["auth"]}},
                {"key": "b", "prompt": "b", "needs": ["a"]},
            ]
        )
    )
    assert afc("submit", "manifest.yaml").returncode == 1
    assert afc("retry", "b").returncode == 0
    (job,) = afc.json("status", "--status", "blocked")["jobs"]
    assert job["waiting"] == (
        "its need 'a' ended failed: the next run fails it (DEPENDENCY_FAILED); 'afc retry a'"
        " lets it run"
    )


def test_the_command_named_for_a_need_names_its_batch_when_keys_repeat(afc):
    """A ledger of several batches: the key 'a' is in both, so 'afc retry a' alone is refused
    (exit 2: which batch?). The advice names the batch, as a job awaiting review's does."""
    jobs = [
        {"key": "a", "prompt": "a", "params": {"fail": ["auth"]}},
        {"key": "b", "prompt": "b", "needs": ["a"]},
    ]
    for batch in ("one", "two"):
        afc.write_manifest(manifest(jobs, batch=batch), name=f"{batch}.yaml")
        assert afc("submit", f"{batch}.yaml").returncode == 1
    assert afc("retry", "b", "--batch", "two").returncode == 0
    (job,) = afc.json("status", "--status", "blocked")["jobs"]
    advice = "'afc retry a --batch two' lets it run"
    assert job["waiting"].endswith(advice), job["waiting"]
    assert afc("retry", "a").returncode == 2  # as said before: refused, naming no batch
    assert afc("retry", "a", "--batch", "two").returncode == 0
