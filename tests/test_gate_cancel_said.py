"""``afc cancel`` and ``afc retry`` of a job with a batch behind it (a style frame) say what
they did to the blocked jobs that need it, as ``afc review reject`` does: a cancel of a gate
failed thousands of jobs (DEPENDENCY_FAILED) with one line, "gate: cancelled", and a retry
of it put them back with one line, "queued again"."""

from __future__ import annotations

import json

from conftest import manifest


def gated(afc, env) -> None:
    """A frame with three jobs behind it (one of them through another) and one beside it."""
    jobs = [
        {"key": "frame", "prompt": "the style frame", "review": True},
        {"key": "shot-1", "prompt": "one", "needs": ["frame"]},
        {"key": "shot-2", "prompt": "two", "needs": ["frame"]},
        {"key": "shot-3", "prompt": "three", "needs": ["shot-2"]},
        {"key": "alone", "prompt": "beside"},
    ]
    afc.write_manifest(manifest(jobs))
    assert afc("submit", "manifest.yaml", "--no-run", "-q", env=env).returncode == 0


def test_a_cancel_and_a_retry_of_a_gate_say_what_they_did_to_the_jobs_behind_it(afc, ledger_url):
    env = {"AFC_LEDGER": ledger_url}
    gated(afc, env)
    shown = afc("cancel", "frame", "alone", env=env)
    assert shown.returncode == 0, shown.stderr
    assert "b1/frame: cancelled\n" in shown.stderr, shown.stderr
    said = "  3 jobs that needed it failed (DEPENDENCY_FAILED); 'afc retry frame' puts them back"
    assert said in shown.stderr, shown.stderr
    # said of the job with jobs behind it only
    assert shown.stderr.count("needed it") == 1, shown.stderr
    assert afc.json("queue", "stats", env=env)["failed"] == 3

    shown = afc("retry", "frame", "alone", "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    retried = {item["key"]: item for item in json.loads(shown.stdout)["retried"]}
    assert retried["frame"]["dependents_blocked"] == 3, retried
    assert "dependents_blocked" not in retried["alone"], retried
    stats = afc.json("queue", "stats", env=env)
    assert stats["failed"] == 0 and stats["blocked"] == 3, stats

    shown = afc("cancel", "frame", "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["cancelled"][0]["dependents_failed"] == 3
    shown = afc("retry", "frame", env=env)
    assert shown.returncode == 0, shown.stderr
    assert "  3 jobs that needed it wait for it again" in shown.stderr, shown.stderr


def test_a_cancel_of_a_gate_with_the_jobs_behind_it_fails_none_of_them(afc, ledger_url):
    """Named together, the jobs behind the gate are cancelled, not failed: none is counted
    as failed on the gate's account."""
    env = {"AFC_LEDGER": ledger_url}
    gated(afc, env)
    shown = afc("cancel", "--batch", "b1", "--yes", "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    cancelled = json.loads(shown.stdout)["cancelled"]
    assert {item["key"] for item in cancelled} == {"frame", "shot-1", "shot-2", "shot-3", "alone"}
    assert not any("dependents_failed" in item for item in cancelled), cancelled
    assert afc.json("queue", "stats", env=env)["failed"] == 0


def test_a_rejection_of_a_gate_says_how_many_jobs_behind_it_failed(afc, ledger_url):
    """As a cancel does: 'afc review reject' said "any job that needed them failed", whether
    none or thousands had."""
    env = {"AFC_LEDGER": ledger_url}
    gated(afc, env)
    assert afc("resume", "-q", env=env).returncode == 0  # the frame is awaiting review
    shown = afc("review", "reject", "frame", "--reason", "too cold", env=env)
    assert shown.returncode == 0, shown.stderr
    said = "3 blocked jobs that needed them failed (DEPENDENCY_FAILED: 'afc status --status"
    assert said in shown.stderr, shown.stderr
    assert afc.json("queue", "stats", env=env)["failed"] == 3

    # a rejection with no job behind it says nothing of dependents; --json counts them
    jobs = [{"key": "other", "prompt": "another frame", "review": True}]
    afc.write_manifest(manifest(jobs, batch="b2"))
    assert afc("submit", "manifest.yaml", "-q", env=env).returncode == 0
    shown = afc("review", "reject", "other", "--reason", "no", env=env)
    assert shown.returncode == 0, shown.stderr
    assert "needed" not in shown.stderr, shown.stderr
    shown = afc("review", "reject", "frame", "--reason", "again", "--json", env=env)
    assert shown.returncode == 2  # rejected already: nothing decided
    jobs = [{"key": "third", "prompt": "a third frame", "review": True}]
    afc.write_manifest(manifest(jobs, batch="b3"))
    assert afc("submit", "manifest.yaml", "-q", env=env).returncode == 0
    shown = afc("review", "reject", "third", "--reason", "no", "--json", env=env)
    assert json.loads(shown.stdout) == {"rejected": ["third"], "dependents_failed": 0}


def test_a_rejection_says_the_re_submit_that_runs_the_jobs_it_failed(afc):
    """It said "a re-submit whose manifest names a new key in their needs, in place of the
    rejected one, runs them": such a re-submit changes nothing of a failed job (its gates
    change only while it is not yet rendered: a warning, the job failed as before). What
    runs them is what the run's own line says: new keys of their own, whose needs name the
    new one. Followed as said, the advice runs them."""
    jobs = [
        {"key": "frame", "prompt": "a frame", "review": True},
        {"key": "shot", "prompt": "a shot", "needs": ["frame"]},
    ]
    afc.write_manifest(manifest(jobs))
    assert afc("submit", "manifest.yaml", "-q").returncode == 0
    shown = afc("review", "reject", "frame", "--reason", "too cold")
    assert shown.returncode == 0, shown.stderr
    assert "new keys of their own" in shown.stderr, shown.stderr
    jobs += [
        {"key": "frame-2", "prompt": "another frame", "review": True},
        {"key": "shot-2", "prompt": "a shot", "needs": ["frame-2"]},
    ]
    afc.write_manifest(manifest(jobs))
    afc("submit", "manifest.yaml", "-q")
    assert afc("review", "approve", "frame-2").returncode == 0
    afc("resume", "-q")
    assert afc.rows("SELECT status FROM jobs WHERE key = 'shot-2'") == [("succeeded",)]
