"""``afc retry`` of a job puts back the jobs that failed because of it (DEPENDENCY_FAILED) and
says they wait for it again; those that also need another job still ended badly (a shot
needing a style frame and a character frame, both cancelled, the style frame alone retried)
fail again at the next run's first look, and it says so, as it does of the retried job
itself. Said only 'wait for it again', a person expected them to run."""

from __future__ import annotations

import json

from conftest import ledger_count, manifest

JOBS = [
    {"key": "style", "prompt": "style frame"},
    {"key": "character", "prompt": "character frame"},
    {"key": "shot-1", "prompt": "one", "needs": ["style", "character"]},
    {"key": "shot-2", "prompt": "two", "needs": ["style", "character"]},
    {"key": "shot-3", "prompt": "three", "needs": ["style"]},
]


def both_frames_cancelled(afc, env: dict[str, str], jobs: list[dict]) -> None:
    """``jobs`` admitted without a run, then its style and character frames cancelled, the
    jobs that need them failed with them."""
    afc.write_manifest(manifest(jobs))
    assert afc("submit", "manifest.yaml", "--no-run", "-q", env=env).returncode == 0
    assert afc("cancel", "style", "character", env=env).returncode == 0


def test_a_retry_says_which_dependents_still_need_a_job_that_ended_badly(afc, ledger_url):
    env = {"AFC_LEDGER": ledger_url}
    both_frames_cancelled(afc, env, JOBS)

    shown = afc("retry", "style", "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    retried = json.loads(shown.stdout)["retried"][0]
    assert retried["dependents_blocked"] == 3, retried
    assert retried["dependents_failing"] == 2, retried  # shot-3 needs the style frame alone

    assert afc("cancel", "style", env=env).returncode == 0
    shown = afc("retry", "style", env=env)
    assert shown.returncode == 0, shown.stderr
    assert "  3 jobs that needed it wait for it again\n" in shown.stderr, shown.stderr
    said = "  2 of them also need a job that ended badly: the next run fails them again at once"
    assert said in shown.stderr, shown.stderr

    # as it said: the next look fails those two again, naming the character frame
    stats = afc.json("queue", "stats", env=env)
    assert stats["blocked"] == 3, stats
    # the worker's look fails them, said and counted as 'afc resume' does (its exit 1 too:
    # tests/test_readme_worker_dependents.py)
    assert afc("worker", "--until-idle", env=env).returncode == 1
    for key in ("shot-1", "shot-2"):
        error = afc.json("show", key, env=env)["job"]["error"]
        assert error["code"] == "DEPENDENCY_FAILED" and "'character'" in error["message"], error


def test_a_retry_of_every_need_at_once_says_none_still_fails(afc, ledger_url):
    """Both frames retried in one command: the shots wait for both, none is said to fail,
    whichever frame's retry put them back."""
    env = {"AFC_LEDGER": ledger_url}
    both_frames_cancelled(afc, env, JOBS)
    shown = afc("retry", "style", "character", "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    retried = {item["key"]: item for item in json.loads(shown.stdout)["retried"]}
    assert retried["style"]["dependents_blocked"] == 3, retried
    assert not any("dependents_failing" in item for item in retried.values()), retried
    shown = afc("cancel", "style", "character", env=env)
    shown = afc("retry", "style", "character", env=env)
    assert "ended badly" not in shown.stderr, shown.stderr


def test_a_failed_gate_given_up_leaves_the_jobs_failed_behind_it_as_they_were(afc, ledger_url):
    """'afc cancel KEY' of a failed style frame gives it up: put back and cancelled in one
    transaction. The put back took the shots that had failed because of it along, and the
    cancel failed them again at once: each with a 'retried' event nobody made and a second
    'job.failed' webhook, and the cancel said '2 jobs that needed it failed' of shots that
    had failed already. They stay as they were; a retry of the frame still puts them back."""
    env = {"AFC_LEDGER": ledger_url, "HOOK_SECRET": "whsec_" + "A" * 32}
    hook = {"url": "http://127.0.0.1:9/h", "secret_env": "HOOK_SECRET", "timeout_s": 2}
    shots = [
        {"key": "frame", "prompt": "refused", "params": {"fail": ["invalid"]}},
        {"key": "shot-1", "prompt": "one", "needs": ["frame"], "webhook": hook},
        {"key": "shot-2", "prompt": "two", "needs": ["frame"]},
    ]
    afc.write_manifest(manifest(shots))
    assert afc("submit", "manifest.yaml", env=env).returncode == 1
    assert afc.json("queue", "stats", env=env)["failed"] == 3
    deliveries = "SELECT COUNT(*) FROM deliveries"
    assert ledger_count(afc, ledger_url, deliveries) == 1  # shot-1's job.failed

    given_up = afc("cancel", "frame", env=env)
    assert given_up.returncode == 0, given_up.stderr
    assert "b1/frame: cancelled (was failed: given up)" in given_up.stderr
    assert "needed it" not in given_up.stderr, given_up.stderr
    kinds = [event["kind"] for event in afc.json("show", "shot-1", env=env)["events"]]
    assert kinds == ["admitted", "failed"], kinds
    assert ledger_count(afc, ledger_url, deliveries) == 1

    back = afc("retry", "frame", "--json", env=env)
    assert back.returncode == 0, back.stderr
    assert json.loads(back.stdout)["retried"][0]["dependents_blocked"] == 2


def test_a_gate_given_up_before_a_run_looked_fails_the_jobs_still_blocked(afc, ledger_url):
    """Shots still blocked behind the failed frame (no run looked since it failed) fail with
    the cancel, counted."""
    from afc_cli.ledger import open_ledger

    env = {"AFC_LEDGER": ledger_url}
    shots = [
        {"key": "frame", "prompt": "f"},
        {"key": "shot-1", "prompt": "one", "needs": ["frame"]},
    ]
    afc.write_manifest(manifest(shots))
    assert afc("submit", "manifest.yaml", "--no-run", "-q", env=env).returncode == 0
    ledger = open_ledger(ledger_url)
    try:  # the frame failed, its shot not looked at yet
        frame = ledger.jobs_by_key("frame")[0]
        ledger.finish(frame, "failed", step="render", error_code="CHAIN_FAILED")
    finally:
        ledger.close()
    shown = afc("cancel", "frame", "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["cancelled"][0]["dependents_failed"] == 1
