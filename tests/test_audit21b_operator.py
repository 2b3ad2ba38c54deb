"""Outside audit 21 (b): the operator's commands over a ledger's life: cron, queue alerts,
retry, cancel and resume, upgrades and copies."""

from __future__ import annotations

import shutil

import pytest
from conftest import jobs, manifest


def _rejected_need(afc, ledger_url: str) -> None:
    """A style frame a person rejected, and the shot that needed it (failed DEPENDENCY_FAILED
    by that decision); beside them a shot failed for real and its dependent."""
    data = manifest(
        [
            {"key": "style", "prompt": "the look", "review": True},
            {"key": "shot", "prompt": "a shot in that look", "needs": ["style"]},
            {"key": "bad", "prompt": "p", "params": {"fail": ["auth"]}},
            {"key": "after-bad", "prompt": "p", "needs": ["bad"]},
        ]
    )
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", "--ledger", ledger_url).returncode == 1
    decided = afc("review", "reject", "style", "--reason", "off-brand", "--ledger", ledger_url)
    assert decided.returncode == 0, decided.stderr


def test_queue_stats_stuck_leaves_out_a_dependent_of_a_rejected_need(afc, ledger_url):
    """``afc resume`` passes by a job failed DEPENDENCY_FAILED only because a person rejected
    (or cancelled) its need (run.follow_decisions): 'afc retry' of it fails it again at once,
    nothing a person can do clears it. ``afc queue stats`` had only ``failed``, which counts
    it, for the alert on the jobs that wait for a person, so the cron wrapper's ``--fail-if
    failed>0`` alerted at every run for ever after one rejection. ``stuck`` counts the failed
    and dead jobs ``afc resume`` exits 1 for."""
    _rejected_need(afc, ledger_url)
    stats = afc.json("queue", "stats", "--ledger", ledger_url)
    # 'bad' and 'after-bad' wait for a person ('afc retry bad' puts both back); 'shot' not
    assert (stats["failed"], stats["stuck"]) == (3, 2), stats
    statuses = {
        job["key"]: job["status"]
        for job in afc.json("status", "--all", "--ledger", ledger_url)["jobs"]
    }
    assert statuses == {
        "style": "rejected",
        "shot": "failed",
        "bad": "failed",
        "after-bad": "failed",
    }
    alert = afc("queue", "stats", "--fail-if", "stuck>0", "--ledger", ledger_url)
    assert alert.returncode == 1 and "stuck=2" in alert.stderr, alert.stderr
    # the two 'afc resume' exits 1 for
    resumed = afc.json("resume", "--ledger", ledger_url, expect=1)
    assert sorted(job["key"] for job in resumed["stuck"]) == ["after-bad", "bad"], resumed


@pytest.mark.skipif(shutil.which("flock") is None, reason="needs flock(1)")
def test_the_cron_wrapper_does_not_alert_for_ever_after_one_rejection(afc):
    from test_cron import run_wrapper

    afc.write_manifest(
        manifest(
            [
                {"key": "style", "prompt": "the look", "review": True},
                {"key": "shot", "prompt": "a shot in that look", "needs": ["style"]},
            ]
        )
    )
    assert afc("submit", "manifest.yaml").returncode == 0
    assert afc("review", "reject", "style", "--reason", "off-brand").returncode == 0
    for _ in range(2):
        result = run_wrapper(afc)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "alert:" not in result.stderr


def test_a_plan_against_a_newer_afcs_ledger_is_refused_as_its_submit_is(afc, ledger_url):
    """A ledger a newer afc migrated is refused by this one's submit (exit 2, 'upgrade afc').
    On SQLite its plan was refused the same way; on PostgreSQL the plan read it without
    looking at its schema and said every job would be rendered, at its estimated spend,
    exit 0, for a submit that then refused to run."""
    from test_upgrade import NEWER, _sql, newer_bookkeeping

    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml", "--no-run", "--ledger", ledger_url).returncode == 0
    bookkeeping = newer_bookkeeping(ledger_url)
    _sql(ledger_url, afc, bookkeeping)
    submitted = afc("submit", "manifest.yaml", "--ledger", ledger_url)
    assert submitted.returncode == 2 and NEWER in submitted.stderr, submitted.stderr
    for args in (("plan",), ("submit", "--dry-run")):
        planned = afc(*args, "manifest.yaml", "--ledger", ledger_url)
        assert planned.returncode == 2, planned.stdout + planned.stderr
        assert NEWER in planned.stderr and "upgrade afc" in planned.stderr.lower()
        assert "to render" not in planned.stdout
