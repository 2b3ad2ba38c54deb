"""A worker's loop meeting a batch looks at that batch's jobs for webhooks, not at every batch
ever admitted (outside audit 61f).

Each batch a worker's refill brings the loop (``run._open_batches``) asked whether the loop's
outbox should start (``start_outbox``), and ``Ledger.has_webhooks`` looked up the unfinished
jobs of every batch of the ledger, one index look-up each: the loop's time grew with the
number of batches it met times the number the ledger ever had. An 'afc worker --until-idle'
running 3,000 one-job batches took 20.7 s (6.9 ms a job; 1.45 ms for 3,000 jobs of one batch),
9.3 s of it in those looks; now 10.4 s (3.5 ms a job). A batch admitted while the loop runs
had, likewise, every batch's rate cards parsed to read its own (``batch_rates``).

Measured in SQLite's virtual machine steps (a progress handler), which no clock moves."""

from __future__ import annotations

import sqlite3

import pytest
from conftest import jobs, manifest

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest
from afc_cli.worker import work

NEW = 20  # one-job batches the worker's refills bring its loop one by one
OLD = 1000  # finished batches of the ledger's past


def admit(afc, ledger: Ledger, name: str, hook: bool = False) -> None:
    extra = (
        {"webhook": {"url": "http://127.0.0.1:9/hook", "secret_env": "AFC_HOOK_SECRET"}}
        if hook
        else {}
    )
    path = afc.write_manifest(manifest(jobs(1), batch=name, **extra), f"{name}.yaml")
    ledger.admit(load_manifest(path), f"file://{afc.cwd}/out", RateCards())


@pytest.fixture
def steps(monkeypatch):
    """SQLite's virtual machine steps (in thousands) of every connection opened from now."""
    count = [0]
    connect = sqlite3.connect

    def counted(*args, **kwargs):
        conn = connect(*args, **kwargs)

        def step() -> int:
            count[0] += 1
            return 0

        conn.set_progress_handler(step, 1000)
        return conn

    monkeypatch.setattr(sqlite3, "connect", counted)
    return count


def worker_steps(afc, tmp_path, steps, old: int) -> int:
    path = str(tmp_path / f"afc-{old}.db")
    ledger = Ledger(path)
    try:
        for n in range(old):
            admit(afc, ledger, f"old{n}")
        ledger.db.execute("UPDATE jobs SET status = 'succeeded'")  # their past: all ended
        for n in range(NEW):
            admit(afc, ledger, f"new{n}")
    finally:
        ledger.close()
    before = steps[0]
    result = work(ledger_path=path, concurrency=1, claim=1, grace_s=5, until_idle=True)
    assert (result.finished, result.failed) == (NEW, 0)
    return steps[0] - before


def test_a_loop_meeting_new_batches_does_not_look_at_every_past_batch(
    afc, tmp_path, steps, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    alone = worker_steps(afc, tmp_path, steps, 0)
    with_past = worker_steps(afc, tmp_path, steps, OLD)
    # the past's share, in thousands of steps: what the loop's start and each of its 20
    # claims read of 1,000 batches' rows ('worker.batch_settings'), about 750; before, 20 ×
    # 1,000 index look-ups besides, about 1,460
    assert with_past - alone < 1000, (alone, with_past)


def test_has_webhooks_of_one_batch(afc, tmp_path):
    ledger = Ledger(str(tmp_path / "afc.db"))
    try:
        admit(afc, ledger, "hooked", hook=True)
        admit(afc, ledger, "plain")
        assert ledger.has_webhooks() and ledger.has_webhooks("hooked")
        assert not ledger.has_webhooks("plain")
        ledger.db.execute(
            "INSERT INTO deliveries (id, job_id, batch, event, url, secret_env, timeout_s,"
            " envelope, status, attempts, next_attempt_at, created_at) SELECT 'd1', id, batch,"
            " 'job.succeeded', 'http://127.0.0.1:9/h', 'AFC_HOOK_SECRET', 10, '{}', 'pending',"
            " 0, 0, 0 FROM jobs WHERE batch = 'hooked'"
        )
        ledger.db.execute("UPDATE jobs SET status = 'succeeded' WHERE batch = 'hooked'")
        assert ledger.has_webhooks("plain")  # a delivery pending: the outbox has work
    finally:
        ledger.close()
