"""Found by an audit of workers on one PostgreSQL ledger: re-submits, review decisions,
budgets and cancels made while ``afc worker`` processes run, each interleaving forced
where a race would take milliseconds to hit."""

from __future__ import annotations

import signal
import time

import pytest
from conftest import jobs, manifest
from test_postgres_e2e import PgAfc
from test_postgres_workers import _wait

from afc_cli.ledger import Ledger
from afc_cli.manifest import job_id_for, load_manifest
from afc_cli.run import manifest_rates


@pytest.fixture
def pg(tmp_path, pg_url) -> PgAfc:
    return PgAfc(tmp_path, pg_url)


def test_a_need_given_while_a_worker_settles_the_blocked_job_is_waited_for(pg):
    """A worker's claim settles a blocked job whose needs have all succeeded
    (``settle_ready_blocked``); a re-submit that gives the job a new need between that
    settle's read of the needs and its write must not be overwritten: the job stays blocked
    for its new need, never queued to render before it."""
    jobs = [
        {"key": "style", "prompt": "style frame", "review": True},
        {"key": "shot", "prompt": "a shot", "needs": ["style"]},
    ]
    pg.write_manifest(manifest(jobs))
    assert pg("submit", "manifest.yaml").returncode == 0  # style renders, awaits review
    assert pg("review", "approve", "style").returncode == 0  # shot: blocked, needs met
    jobs.insert(1, {"key": "grade", "prompt": "colour grade"})
    jobs[2]["needs"] = ["style", "grade"]
    pg.write_manifest(manifest(jobs))
    resubmitted = load_manifest(pg.cwd / "manifest.yaml")

    worker, submit = Ledger(pg.url), Ledger(pg.url)
    storage = worker.batch("b1")["storage"]
    read_needs = worker.needs_of
    admitted = []

    def needs_then_resubmit(job_id):
        needs = read_needs(job_id)
        if not admitted:  # the re-submit commits between the settle's read and its write
            admitted.append(submit.admit(resubmitted, storage, manifest_rates(resubmitted)))
        return needs

    worker.needs_of = needs_then_resubmit
    try:
        status, waiting = worker.settle_blocked(job_id_for("b1", "shot"))
    finally:
        worker.close()
        submit.close()
    assert admitted[0].gates_changed == [{"key": "shot", "needs": ["style", "grade"]}]
    assert (status, waiting) == ("blocked", [job_id_for("b1", "grade")])
    assert dict(pg.rows("SELECT key, status FROM jobs")) == {
        "style": "succeeded",
        "grade": "queued",
        "shot": "blocked",
    }


def test_a_worker_named_into_a_budget_without_a_cap_is_refused(pg):
    """``--budget NAME`` alone ran the worker uncapped, its attempts outside that budget's
    spend: started beside a capped worker of the same name, it spent past their cap."""
    pg.write_manifest(manifest(jobs(4)))
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    refused = pg("worker", "--until-idle", "--budget", "nightly")
    assert refused.returncode == 2
    assert "--budget nightly" in refused.stderr and "--max-spend" in refused.stderr
    assert pg.rows("SELECT COUNT(*) FROM attempts") == [(0,)]
    capped = pg.json(
        "worker", "--until-idle", "--budget", "nightly", "--max-spend", "0.10", expect=4
    )
    assert capped["budget"]["name"] == "nightly"
    assert pg.rows("SELECT COUNT(*) FROM attempts") == [(2,)]


def test_a_request_polled_by_another_run_stays_in_the_budget_that_paid_it(pg, fake):
    """Two Replicate predictions submitted by a worker of a shared budget (its whole cap
    reserved), the worker killed; another host's run without that budget polls them to their
    end. They were paid under the budget and stay counted in it: moved to the polling run's
    id, the budget's spend fell to 0 and its next worker paid for the cap a second time."""
    pg.env.update(fake.env())
    chain = [{"provider": "replicate", "model": "owner/model", "attempts": 1}]
    rates = [{"provider": "replicate", "model": "owner/model", "per_image": "0.05"}]
    held = [{"key": f"held-{i}", "prompt": f"hold render {i}"} for i in range(2)]
    later = [{"key": f"later-{i}", "prompt": f"later render {i}"} for i in range(2)]
    pg.write_manifest(manifest(held, defaults={"chain": chain}, rates=rates))
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    lease = {"AFC_LEASE_S": "3"}
    worker = pg.popen(
        "worker", "--concurrency", "2", "--max-spend", "0.10", env={"AFC_HOST_ID": "a", **lease}
    )
    _wait(pg, "SELECT COUNT(*) FROM attempts WHERE provider_request_id IS NOT NULL", 2)
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=30)
    fake.released.set()
    time.sleep(3.2)  # the dead host's leases expire
    resumed = pg("resume", env={"AFC_HOST_ID": "b", **lease})
    assert resumed.returncode == 0, resumed.stderr
    assert fake.counts["replicate_submit"] == 2, "polled, not paid again"
    pg.write_manifest(manifest([*held, *later], defaults={"chain": chain}, rates=rates))
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    again = pg.json("worker", "--until-idle", "--max-spend", "0.10", expect=4)
    assert again["budget"]["priced"] == "0.100000"
    assert fake.counts["replicate_submit"] == 2, "the budget's cap was spent already"
