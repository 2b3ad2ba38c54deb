"""Blocked jobs that only a person's decision can settle start no task in a run
(afc_cli/run.py ``run_jobs``, ``Ledger.parked_blocked``): each need succeeded or awaiting
review. A cron'd ``afc resume`` of 100,000 shots behind a style frame awaiting review started
a task and a transaction for each, to find each still blocked: 20 s and 630 MB to run
nothing. The run's outcome is the same: the summary counts them, a decision made while it
runs still runs them, and a job with a need still to run is not one of them."""

from __future__ import annotations

from conftest import ledger_count, manifest, wait_for_ledger

from afc_cli import run as run_mod

STYLE = {"key": "style", "prompt": "style frame", "review": True}


def _statuses(afc, ledger_url: str) -> dict[str, str]:
    from afc_cli.ledger import Ledger

    ledger = Ledger(ledger_url)
    try:
        return dict(ledger.db.execute("SELECT key, status FROM jobs").fetchall())
    finally:
        ledger.close()


def test_a_resume_starts_no_task_for_jobs_waiting_only_on_a_review(
    afc, ledger_url, monkeypatch, tmp_path
):
    afc.env["AFC_LEDGER"] = ledger_url
    afc.write_manifest(manifest([STYLE]))
    assert afc("submit", "manifest.yaml").returncode == 0  # the style frame awaits review
    afc.write_manifest(
        manifest(
            [
                STYLE,
                {"key": "shot-1", "prompt": "a boat", "needs": ["style"]},
                {"key": "shot-2", "prompt": "a keeper", "needs": ["style"]},
                # a need still to run in this run, which fails: not parked, and failed by it
                {"key": "broken", "prompt": "x", "params": {"fail": ["invalid"]}},
                {"key": "mixed", "prompt": "both", "needs": ["style", "broken"]},
                # blocked behind a parked job: a task, which finds it blocked still
                {"key": "title", "prompt": "title card", "needs": ["shot-1"]},
            ]
        )
    )
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    started: list[str] = []
    real = run_mod._start

    def recorded(ctx, job_id):
        started.append(ctx.ledger.job(job_id)["key"])
        return real(ctx, job_id)

    monkeypatch.setattr(run_mod, "_start", recorded)
    monkeypatch.chdir(afc.cwd)
    monkeypatch.setenv("AFC_SPOOL_DIR", str(tmp_path / "spool"))
    result = run_mod.resume(
        ledger_path=ledger_url, batch=None, storage=None, concurrency=4, grace_s=5
    )
    assert sorted(started) == ["broken", "mixed", "title"]
    assert result.stats.ran == 5  # the two parked shots counted as run here, as before
    assert _statuses(afc, ledger_url) == {
        "style": "awaiting_review",
        "shot-1": "blocked",
        "shot-2": "blocked",
        "broken": "failed",
        "mixed": "failed",
        "title": "blocked",
    }


def test_a_parked_job_whose_need_is_approved_during_the_resume_runs_in_it(afc, ledger_url):
    afc.env["AFC_LEDGER"] = ledger_url
    afc.write_manifest(manifest([STYLE]))
    assert afc("submit", "manifest.yaml").returncode == 0
    afc.write_manifest(
        manifest(
            [
                STYLE,
                {"key": "shot", "prompt": "a boat", "needs": ["style"]},
                {"key": "long", "prompt": "a long render"},
            ]
        )
    )
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    release = afc.cwd / "release"
    (afc.cwd / "release.shot").touch()
    proc = afc.popen("resume", env={"AFC_LOCAL_RELEASE": str(release)})
    try:
        wait_for_ledger(afc, ledger_url, "SELECT COUNT(*) FROM jobs WHERE status = 'running'")
        assert afc("review", "approve", "style").returncode == 0
        (afc.cwd / "release.long").touch()
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    succeeded = "SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'"
    assert ledger_count(afc, ledger_url, succeeded) == 3, stderr
    assert "2 run here; of 2 job(s): 2 succeeded" in stderr, stderr
