"""Outside audit 42c (money, as the user reads it): a submit under a budget whose jobs another
live afc process runs (an ``afc worker`` of the same ledger, a service) says that its budget
does not cap them.

A budget caps the calls of the run given it (``Ledger.start_attempt``, its run id); a worker
renders the jobs it claims under its own ``--max-spend``, or none (README, "One budget for all
workers": a manifest's ``budget`` is a submit's). ``afc submit --no-run`` under a budget warns
so; a submit that ran said only that the jobs were 'being run by another afc process', and its
summary 'this run spent 0.000000 USD (priced)', while the worker paid for every job of the
manifest with the ``budget: "0.05"`` uncapped: 0.15 USD, three times the cap, with nothing
said of the budget."""

from __future__ import annotations

import time

from conftest import manifest


def test_a_submit_under_a_budget_says_it_does_not_cap_the_jobs_a_worker_runs(afc):
    log, release = afc.cwd / "calls.log", afc.cwd / "release"
    env = {"AFC_LOCAL_CALL_LOG": str(log), "AFC_LOCAL_RELEASE": str(release)}
    keys = [{"key": f"shot-{i}", "prompt": f"p{i}"} for i in range(3)]
    afc.write_manifest(manifest(keys, budget="0.05"))
    admitted = afc("submit", "manifest.yaml", "--no-run")
    assert admitted.returncode == 0, admitted.stderr
    worker = afc.popen("worker", "--concurrency", "4", "--poll", "0.05", env=env)
    try:
        deadline = time.time() + 60
        while not (log.exists() and len(log.read_text().splitlines()) == 3):
            assert time.time() < deadline and worker.poll() is None, worker.stderr.read()
            time.sleep(0.05)
        # the worker's three calls are in flight: the submit leaves every job to it
        run = afc("submit", "manifest.yaml")
        assert run.returncode == 1, run.stderr
        assert "being run by another afc process" in run.stderr
        assert (
            "warning: the manifest's budget of 0.050000 USD caps this run's own calls: "
            "3 jobs of batch b1 are run by another afc process"
        ) in run.stderr, run.stderr
        assert (
            "under that process's own budget (an afc worker's --max-spend; none given: no cap)"
            in run.stderr
        )
        release.touch()
        deadline = time.time() + 60
        while afc.rows("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'")[0][0] < 3:
            assert time.time() < deadline and worker.poll() is None, worker.stderr.read()
            time.sleep(0.05)
        worker.terminate()
        worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    # the warning's reason: the batch spent three times the manifest's budget
    report = afc.json("costs", "report", "--by", "batch")
    assert report["total"]["priced"] == "0.150000"
    # a submit that ran every job itself says nothing of the kind
    afc.write_manifest(manifest(keys, batch="b2", budget="0.05"))
    alone = afc("submit", "manifest.yaml")
    assert alone.returncode == 4, alone.stderr
    assert "caps this run's own calls" not in alone.stderr
