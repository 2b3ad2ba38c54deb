"""``PostgresLedger.write_error`` says a lost session was ended by the server for a freeze
(``errors.FrozenSession``: the process stopped or starved past its lease with its group
transaction open, ``_bound_idle_transactions``) only when a transaction *was* open that long.
It measured the time since the last transaction began, open or long committed: a session
lost after a quiet lease with nothing open (a restart or failover met by a read outside any
transaction) would have been called a freeze of afc's own, 'nothing is wrong with the server',
sending the operator away from the server that failed (left open by outside audit 63d).

A unit test of the judgement on a real server (the ``pg_url`` fixture): the clock it reads
(``awake_clock``) is moved on a lease instead of waiting one."""

from __future__ import annotations

import asyncio

import psycopg

from afc_cli.ledger import postgres


def test_only_a_transaction_open_past_the_lease_is_called_a_freeze(pg_url, monkeypatch):
    clock = [1_000.0]
    monkeypatch.setattr(postgres, "awake_clock", lambda: clock[0])
    ledger = postgres.PostgresLedger(pg_url)

    def lost() -> str:  # a new loss each time: one already worded is said as it was
        exc = psycopg.OperationalError("terminating connection due to administrator command")
        return str(ledger.write_error(exc))

    async def run() -> tuple[str, str]:
        with ledger.grouped(asyncio.get_running_loop()):
            bound = ledger._idle_bound
            assert bound is not None
            with ledger.tx():
                ledger.db.execute("SELECT 1")
            clock[0] += bound + 1  # the group's transaction open a whole lease: frozen
            frozen = lost()
            ledger.flush()  # committed: none open
            clock[0] += bound + 1  # a quiet lease, nothing open
            quiet = lost()
            return frozen, quiet

    try:
        frozen, quiet = asyncio.run(run())
    finally:
        ledger.close()
    assert "stopped or starved" in frozen, frozen
    assert "stopped or starved" not in quiet, quiet
    assert "check the database server" in quiet, quiet
