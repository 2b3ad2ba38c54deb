"""``afc retry``'s ``dependents_failing`` counts the jobs after a put-back dependent that
fails again: an edit needing a shot that needs the style frame and the character frame, both
cancelled, the style frame alone retried. The shot still needs the cancelled character frame;
the edit needs only the shot, so it was not counted, and the retry said one of the two jobs put
back fails again: the next run failed both (the edit behind the shot, DEPENDENCY_FAILED), and
a person expected the edit to run."""

from __future__ import annotations

import json

from test_audit40c_retry_dependents import both_frames_cancelled

JOBS = [
    {"key": "style", "prompt": "style frame"},
    {"key": "character", "prompt": "character frame"},
    {"key": "shot", "prompt": "the shot", "needs": ["style", "character"]},
    {"key": "edit", "prompt": "the edit", "needs": ["shot"]},
]


def test_a_retry_counts_the_jobs_after_a_dependent_that_fails_again(afc, ledger_url):
    env = {"AFC_LEDGER": ledger_url}
    both_frames_cancelled(afc, env, JOBS)

    shown = afc("retry", "style", "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    retried = json.loads(shown.stdout)["retried"][0]
    assert retried["dependents_blocked"] == 2, retried
    assert retried["dependents_failing"] == 2, retried  # the shot, and the edit after it

    assert afc("cancel", "style", env=env).returncode == 0
    shown = afc("retry", "style", env=env)
    said = "  2 of them also need a job that ended badly: the next run fails them again at once"
    assert said in shown.stderr, shown.stderr

    # as it said: the next run fails both again (said and counted by the worker, exit 1, as
    # 'afc resume' does: tests/test_readme_worker_dependents.py)
    assert afc("worker", "--until-idle", env=env).returncode == 1
    for key in ("shot", "edit"):
        job = afc.json("show", key, env=env)["job"]
        assert (job["status"], job["error"]["code"]) == ("failed", "DEPENDENCY_FAILED"), job


def test_a_dependent_whose_needs_were_all_retried_is_not_said_to_fail(afc, ledger_url):
    """Both frames retried in one command: neither the shot nor the edit is said to fail."""
    env = {"AFC_LEDGER": ledger_url}
    both_frames_cancelled(afc, env, JOBS)
    shown = afc("retry", "style", "character", "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    retried = json.loads(shown.stdout)["retried"]
    assert not any("dependents_failing" in item for item in retried), retried
