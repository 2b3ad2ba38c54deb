"""Paid attempt rows starting together share one synced commit; admission of a big list is
chunked but one transaction; ``afc queue stats`` reads through indexes."""

from __future__ import annotations

import asyncio
import sqlite3

from conftest import jobs, manifest

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest


def admitted(afc, n: int):
    path = afc.write_manifest(manifest(jobs(n)))
    ledger = Ledger(afc.cwd / "afc.db")
    m = load_manifest(path)
    ledger.admit(m, "file:///tmp/x", RateCards())
    claimed = [ledger.claim(job.job_id, 300) for job in m.jobs]
    return ledger, claimed


def test_paid_attempts_starting_together_share_one_synced_commit(afc, monkeypatch):
    ledger, claimed = admitted(afc, 5)
    syncs = []
    real = ledger._sync_wal
    monkeypatch.setattr(ledger, "_sync_wal", lambda: (syncs.append(1), real()))

    def visible() -> int:
        other = sqlite3.connect(afc.cwd / "afc.db")
        try:
            return other.execute("SELECT COUNT(*) FROM attempts").fetchone()[0]
        finally:
            other.close()

    async def main():
        with ledger.grouped(asyncio.get_running_loop()):
            for job in claimed:
                assert ledger.start_attempt(job, 0, "openai", "m", None, durable=True) == 1
            assert visible() == 0  # not committed yet: one commit for all five is coming
            await asyncio.gather(*(ledger.committed() for _ in claimed))
            assert visible() == 5 and syncs == [1]  # committed, and the WAL synced once
            for job in claimed:  # the free local provider: committed, never synced
                ledger.finish(job, "cancelled", step="render")
            await ledger.committed()
            assert syncs == [1]

    try:
        asyncio.run(main())
    finally:
        ledger.close()


def test_outside_a_run_loop_a_paid_attempt_commits_at_once(afc):
    ledger, claimed = admitted(afc, 1)
    try:
        assert ledger.start_attempt(claimed[0], 0, "openai", "m", None, durable=True) == 1
        other = sqlite3.connect(afc.cwd / "afc.db")
        assert other.execute("SELECT COUNT(*) FROM attempts").fetchone()[0] == 1
        other.close()
    finally:
        ledger.close()
