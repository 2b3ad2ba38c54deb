"""'afc retry' of a job whose need still ended badly puts it back to blocked, and the next run
fails it again at once (DEPENDENCY_FAILED): the retry says so, naming the need, rather than
'it waits for the jobs it needs' (a cron'd resume's exit 1 was the first sign)."""

from __future__ import annotations

from conftest import manifest


def test_a_retried_job_whose_need_was_rejected_is_told_it_fails_again(afc):
    afc.write_manifest(
        manifest(
            [
                {"key": "style", "prompt": "a style frame", "review": True},
                {"key": "shot", "prompt": "a shot", "needs": ["style"]},
            ]
        )
    )
    assert afc("submit", "manifest.yaml").returncode == 0
    assert afc("review", "reject", "style", "--reason", "too dark").returncode == 0
    assert dict(afc.rows("SELECT key, status FROM jobs"))["shot"] == "failed"

    retried = afc("retry", "shot")
    assert retried.returncode == 0, retried.stderr
    assert (
        "b1/shot: blocked again (was failed), but its need 'style' is rejected: the next run "
        "fails it again at once (DEPENDENCY_FAILED); a rejected job is final" in retried.stderr
    ), retried.stderr
    assert "waits for the jobs it needs" not in retried.stderr

    afc("cancel", "shot")
    out = afc.json("retry", "shot")
    assert out["retried"] == [
        {
            "key": "shot",
            "batch": "b1",
            "was": "cancelled",
            "status": "blocked",
            "ended_needs": [{"key": "style", "status": "rejected"}],
        }
    ]


def test_a_retried_job_whose_need_failed_is_told_to_retry_the_need(afc):
    afc.write_manifest(
        manifest(
            [
                {"key": "a", "prompt": "a", "params": {"fail": ["auth"]}},
                {"key": "b", "prompt": "b", "needs": ["a"]},
            ]
        )
    )
    assert afc("submit", "manifest.yaml").returncode == 1
    retried = afc("retry", "b")
    assert "b1/b: blocked again (was failed), but its need 'a' is failed" in retried.stderr
    assert "retry that need first ('afc retry KEY')" in retried.stderr
    # retried with its need, it waits for it: said as before, no ended need
    afc("cancel", "b")
    out = afc.json("retry", "a", "b")
    assert [(r["key"], r["status"], "ended_needs" in r) for r in out["retried"]] == [
        ("a", "queued", False),
        ("b", "blocked", False),
    ]
