"""Found by an audit of workers on one PostgreSQL ledger: re-submits, review decisions,
budgets and cancels made while ``afc worker`` processes run, each interleaving forced
where a race would take milliseconds to hit."""

from __future__ import annotations

import pytest
from conftest import jobs, manifest
from test_postgres_e2e import PgAfc

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
