"""Outside audit 40a: a worker's look for blocked jobs whose needs ended (``worker.Settle``).

``afc worker --until-idle`` waiting for a job another process holds makes that look on the
claims' schedule, not at every poll.

The look before saying idle was forced at every poll, also while jobs held elsewhere kept the
worker from being idle at all: beside 100,000 shots blocked behind a style frame awaiting
review (half a second a look on SQLite), a worker waiting on another host's long render spent
a quarter of its time reading them (20 s of waiting: 4.9 s of CPU; 1.4 s now), for as long as
that render ran."""

from __future__ import annotations

import time

import pytest
from conftest import manifest
from test_issue17_review import style_manifest
from test_worker_settle import _slow_looks

from afc_cli.errors import LedgerError
from afc_cli.ledger import Ledger
from afc_cli.worker import work

OTHER = "render-02:4242:777"  # another host's live worker, its lease far from its end
POLLS = 8


def test_a_worker_waiting_on_another_process_does_not_look_at_every_poll(
    afc, ledger_url, monkeypatch, tmp_path
):
    looks = _slow_looks(monkeypatch)
    monkeypatch.setenv("AFC_SPOOL_DIR", str(tmp_path / "spool"))
    afc.env["AFC_LEDGER"] = ledger_url
    style_manifest(afc)
    assert afc("submit", "manifest.yaml").returncode == 0  # the style frame awaits review
    afc.write_manifest(manifest([{"key": "long", "prompt": "a long render"}], batch="plain"))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    ledger = Ledger(ledger_url)
    try:
        with ledger.tx():
            ledger.db.execute(
                "UPDATE jobs SET status = 'running', lease_owner = ?, lease_expires = ?"
                " WHERE key = 'long'",
                (OTHER, time.time() + 3600),
            )
    finally:
        ledger.close()

    polls: list[int] = []
    real = Ledger.runnable_job_ids

    def counted(self, batch=None, **kw):
        polls.append(1)
        if len(polls) == POLLS:  # that worker's render ended, its job let go
            with self.tx():
                self.db.execute(
                    "UPDATE jobs SET status = 'queued', lease_owner = NULL, lease_expires = NULL"
                    " WHERE key = 'long'"
                )
        return real(self, batch, **kw)

    monkeypatch.setattr(Ledger, "runnable_job_ids", counted)
    result = work(ledger_path=ledger_url, concurrency=1, poll_s=0.01, grace_s=5, until_idle=True)
    assert result.idle and result.finished == 1, result
    assert (result.awaiting_review, result.blocked) == (1, 3)
    assert len(polls) >= POLLS
    # the first claim's look and the one before idle: it looked at every poll of its wait
    assert looks == [None, None], looks


def test_a_batch_worker_still_looks_before_it_says_idle(afc, ledger_url, monkeypatch, tmp_path):
    """With --batch, and no job of the batch held elsewhere, the look before idle runs the
    chain to its end, as without --batch (tests/test_worker_settle.py)."""
    looks = _slow_looks(monkeypatch)
    monkeypatch.setenv("AFC_SPOOL_DIR", str(tmp_path / "spool"))
    afc.env["AFC_LEDGER"] = ledger_url
    style_manifest(afc, review=False)
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    result = work(
        ledger_path=ledger_url, batch="b1", concurrency=2, claim=2, grace_s=5, until_idle=True
    )
    assert result.idle and result.finished == 4 and result.blocked == 0, result
    assert looks == ["b1"] * 4, looks


def test_a_migration_met_by_the_look_before_a_claim_is_said_as_one(
    afc, ledger_url, monkeypatch, tmp_path
):
    """A newer afc migrating the ledger between a worker's check of its schema and its look
    for blocked jobs (``worker.Settle``, made before the claim since 3c349fd): on PostgreSQL
    the look's prepared read of a job's row fails ('cached plan must not change result type').
    The claim's failure was said as the migration it is (exit 2); the look's was raised as it
    came, 'unexpected error ... (a bug in afc)', exit 1."""
    from test_upgrade import _sql, newer_bookkeeping

    monkeypatch.setenv("AFC_SPOOL_DIR", str(tmp_path / "spool"))
    afc.env["AFC_LEDGER"] = ledger_url
    style_manifest(afc)
    assert afc("submit", "manifest.yaml").returncode == 0
    bookkeeping = newer_bookkeeping(ledger_url)
    looks: list[int] = []
    real = Ledger.settle_ready_blocked

    def migrated_meanwhile(self, batch=None, limit=1000, failed=None):
        looks.append(1)
        if len(looks) == 2:  # the second claim's look: the newer afc has just migrated
            _sql(ledger_url, afc, bookkeeping)
            raise RuntimeError("cached plan must not change result type")
        return real(self, batch, limit, failed)

    monkeypatch.setattr(Ledger, "settle_ready_blocked", migrated_meanwhile)
    with pytest.raises(LedgerError, match="was migrated by a newer afc"):
        work(ledger_path=ledger_url, concurrency=1, poll_s=0.01, grace_s=5)
    assert len(looks) == 2
