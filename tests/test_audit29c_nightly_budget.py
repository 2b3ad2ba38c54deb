"""Outside audit 29c, the known item "a shared --budget never resets", as a nightly cron user
meets it. A workers' shared budget counts every attempt its workers started since its first
(README, 'One budget for all workers'): by design, since the cap is not kept in the ledger and
workers on many hosts share it. A cron user who caps each night can do so, with a budget named
after the night; what was wrong is that nothing said so: 'afc worker --help' called
--max-spend a cap on "this run's" spend, and the worker that exits 4 at once on the second
night, having run nothing, did not say why its budget was already spent."""

from __future__ import annotations

from conftest import jobs, manifest


def test_a_nightly_worker_is_told_its_budget_never_resets_and_a_new_name_caps_a_night(afc):
    afc.write_manifest(manifest(jobs(2), batch="night1"))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    first = afc("worker", "--until-idle", "--budget", "nightly", "--max-spend", "0.10")
    assert first.returncode == 0, first.stderr
    assert afc.rows("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'") == [(2,)]

    afc.write_manifest(manifest(jobs(2), batch="night2"), "night2.yaml")
    assert afc("submit", "night2.yaml", "--no-run").returncode == 0
    # the same name the next night: the budget still holds the first night's 0.10
    second = afc("worker", "--until-idle", "--budget", "nightly", "--max-spend", "0.10")
    assert second.returncode == 4, second.stderr
    assert "spent 0.000000 USD (priced)" in second.stderr
    assert "stopped by the budget spent before this worker started" in second.stderr
    assert "never reset" in second.stderr and "--budget nightly-$(date +%F)" in second.stderr
    # a budget named after the night caps that night's spend alone
    third = afc("worker", "--until-idle", "--budget", "nightly-2026-12-02", "--max-spend", "0.10")
    assert third.returncode == 0, third.stderr
    assert "spent before" not in third.stderr
    assert afc.rows("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'") == [(4,)]
    assert afc.rows("SELECT run_id, COUNT(*) FROM attempts GROUP BY run_id ORDER BY 1") == [
        ("budget:nightly", 2),
        ("budget:nightly-2026-12-02", 2),
    ]


def test_the_worker_help_says_whose_spend_its_max_spend_caps(afc):
    helped = afc("worker", "--help")
    assert helped.returncode == 0
    text = " ".join(helped.stdout.split())
    assert "Cap this run's priced spend" not in text
    assert "every worker of this --budget" in text and "never reset" in text
