"""``afc worker`` keeps one run loop across its claims (afc_cli/worker.py ``Refill``): when the
loop runs low, the next claim's jobs join it; a claim it cannot run there is released."""

from __future__ import annotations

import pytest
from conftest import jobs, manifest

from afc_cli import run as run_mod
from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest
from afc_cli.worker import Refill, Settle, WorkerResult, batch_settings, work


@pytest.fixture
def admitted(afc, ledger_url):
    path = afc.write_manifest(manifest(jobs(10)))
    ledger = Ledger(ledger_url)
    m = load_manifest(path)
    ledger.admit(m, f"file://{afc.cwd}/out", RateCards())
    ledger.close()
    return ledger_url, m


def test_claims_join_one_run_loop_and_every_job_runs_once(admitted, monkeypatch, tmp_path):
    url, m = admitted
    loops = []
    real = run_mod.run_jobs

    def counted(*args, **kwargs):
        loops.append(len(args[1]))
        return real(*args, **kwargs)

    monkeypatch.setattr(run_mod, "run_jobs", counted)
    monkeypatch.setenv("AFC_SPOOL_DIR", str(tmp_path / "spool"))  # a PostgreSQL ledger's
    result = work(ledger_path=url, concurrency=1, claim=3, grace_s=5, until_idle=True)
    assert (result.claimed, result.rounds, result.finished) == (10, 4, 10)
    assert loops == [3]  # one loop, started with the first claim; the others joined it
    ledger = Ledger(url)
    try:
        for job in m.jobs:
            row = ledger.job(job.job_id)
            assert row["status"] == "succeeded" and row["lease_owner"] is None
            assert len(ledger.attempts(job.job_id)) == 1
    finally:
        ledger.close()


def test_a_claim_given_back_by_the_loop_is_not_counted_as_claimed(
    admitted, afc, monkeypatch, tmp_path
):
    """A batch the round first meets in a refill, whose storage fails its check that time (a
    5xx): its claim goes back, the next round runs it. The summary counted it claimed twice."""
    from afc_cli.errors import StorageError

    url, _ = admitted
    monkeypatch.setenv("AFC_SPOOL_DIR", str(tmp_path / "spool"))
    other = load_manifest(afc.write_manifest(manifest(jobs(1), batch="b2"), "b2.yaml"))
    ledger = Ledger(url)
    try:
        ledger.admit(other, f"file://{afc.cwd}/out2", RateCards())
    finally:
        ledger.close()

    checks = []
    check_storage = run_mod.check_storage

    def failing_once(storage, *args, **kwargs):
        if storage.url.endswith("/out2") and not checks:
            checks.append(storage.url)
            raise StorageError("storage unavailable: 503 Slow Down", retryable=True)
        return check_storage(storage, *args, **kwargs)

    monkeypatch.setattr(run_mod, "check_storage", failing_once)
    result = work(ledger_path=url, concurrency=1, claim=3, grace_s=5, until_idle=True)
    assert checks  # the refill met the failing check
    assert (result.claimed, result.finished) == (11, 11)


def test_a_claim_the_loop_cannot_run_is_released_and_ends_the_feeding(admitted):
    """Jobs of a batch changed since the loop started (its rate cards or limits, read at its
    start) go back at once; the worker's next round claims them with a fresh loop."""
    url, _ = admitted
    ledger = Ledger(url)
    settle = Settle(ledger, None)
    try:
        (limits, rates) = batch_settings(ledger)["b1"]
        changed = {"b1": (limits, f"{rates} ")}  # the cards the loop read: another text
        refill = Refill(
            ledger, 4, 60, None, changed, lambda jobs: None, _Never(), WorkerResult(), None, settle
        )
        assert refill(set()) == []
        assert refill.done and refill(set()) == []
        held = ledger.db.execute("SELECT COUNT(*) FROM jobs WHERE lease_owner IS NOT NULL")
        assert held.fetchone()[0] == 0
        opened = batch_settings(ledger)
        fed = Refill(
            ledger, 4, 60, None, opened, lambda jobs: None, _Never(), WorkerResult(), None, settle
        )
        assert len(fed(set())) == 4 and fed.result.claimed == 4
    finally:
        ledger.close()


def test_a_batch_admitted_since_the_loop_started_joins_it_unless_its_limits_are_stricter(
    admitted,
):
    url, _ = admitted
    ledger = Ledger(url)
    settle = Settle(ledger, None)
    try:
        loose = '{"local": {"concurrency": 50, "per_minute": null}}'
        (_, rates) = batch_settings(ledger)["b1"]
        # the loop started with another batch alone, of looser limits: b1 came after it
        opened = {"b0": (loose, rates)}
        stricter = Refill(
            ledger, 4, 60, None, opened, lambda jobs: None, _Never(), WorkerResult(), None, settle
        )
        strict = '{"local": {"concurrency": 2, "per_minute": null}}'
        with ledger.tx():
            ledger.db.execute("UPDATE batches SET limits_json = ? WHERE name = 'b1'", [strict])
        assert stricter(set()) == [] and stricter.done
        with ledger.tx():
            ledger.db.execute("UPDATE batches SET limits_json = ? WHERE name = 'b1'", [loose])
        opened = {"b0": (loose, rates)}
        joined = Refill(
            ledger, 4, 60, None, opened, lambda jobs: None, _Never(), WorkerResult(), None, settle
        )
        assert len(joined(set())) == 4
        assert set(opened) == {"b0", "b1"}  # b1 is the loop's now: a change of it ends it
        # a batch naming a provider with every limit null limits nothing: it joins too
        nulls = '{"openai": {"concurrency": null, "per_minute": null}}'
        with ledger.tx():
            ledger.db.execute("UPDATE batches SET limits_json = ? WHERE name = 'b1'", [nulls])
        opened = {"b0": (loose, rates)}
        unlimited = Refill(
            ledger, 4, 60, None, opened, lambda jobs: None, _Never(), WorkerResult(), None, settle
        )
        assert len(unlimited(set())) == 4
    finally:
        ledger.close()


class _Never:
    def is_set(self) -> bool:
        return False
