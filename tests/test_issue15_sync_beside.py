"""A group commit's WAL sync runs beside the run loop: other jobs go on while the disk syncs,
and the jobs awaiting the commit (their paid call's attempt row) go on only once it synced."""

from __future__ import annotations

import asyncio
import threading

import pytest
from test_issue15_ledger import admitted

from afc_cli.errors import LedgerWriteError


def test_the_loop_runs_while_the_wal_syncs_and_waiters_wait_for_it(afc, monkeypatch):
    ledger, claimed = admitted(afc, 3)
    release = threading.Event()
    synced = []
    real = ledger._sync_wal

    def slow_sync() -> None:
        # the loop must set ``release`` while this sync runs: were the sync in the loop's
        # thread, nothing could, and the wait would time out
        synced.append(release.wait(timeout=10))
        real()

    monkeypatch.setattr(ledger, "_sync_wal", slow_sync)
    order = []

    async def other_job() -> None:
        await asyncio.sleep(0.01)
        order.append("other job ran")
        release.set()

    async def paid(job) -> None:
        ledger.start_attempt(job, 0, "openai", "m", None, durable=True)
        await ledger.committed()
        order.append("synced" if synced else "went on before the sync")

    async def main():
        with ledger.grouped(asyncio.get_running_loop()):
            await asyncio.gather(other_job(), *(paid(job) for job in claimed))

    try:
        asyncio.run(main())
    finally:
        ledger.close()
    assert synced == [True]  # one sync, and the loop ran while it did
    assert order == ["other job ran", "synced", "synced", "synced"]


def test_a_failed_sync_fails_its_waiters_and_stops_the_run(afc, monkeypatch):
    ledger, claimed = admitted(afc, 2)

    def broken_sync() -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(ledger, "_sync_wal", broken_sync)

    async def main():
        with ledger.grouped(asyncio.get_running_loop()):
            ledger.start_attempt(claimed[0], 0, "openai", "m", None, durable=True)
            with pytest.raises(LedgerWriteError, match="Input/output error"):
                await ledger.committed()
            with pytest.raises(LedgerWriteError):  # the next write stops the run
                ledger.start_attempt(claimed[1], 0, "openai", "m", None, durable=True)

    try:
        asyncio.run(main())
    finally:
        ledger._broken = False
        ledger.close()
