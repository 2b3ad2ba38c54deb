"""What a worker looks up as it starts (``Ledger.unfinished_batches``: the batches it may run,
whose storage it checks; ``Ledger.host_id_sharers``: another machine under this host id)
is found per batch in the (batch, status) index, on both engines: by status alone, each read
every job of the ledger (at 100,000 jobs in 20 batches on PostgreSQL, 10-32 ms and 7-8 ms a
start, growing with the ledger; on SQLite 3 ms and 9 ms at 20,100 jobs), where a look-up per
batch takes under a millisecond."""

from __future__ import annotations

import sqlite3

import pytest
from conftest import jobs, manifest, recorded_statements

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest


@pytest.fixture
def two_batches(ledger_url, afc):
    ledger = Ledger(ledger_url)
    for name in ("b1", "b2"):
        data = manifest(jobs(1000))
        data["batch"] = name
        ledger.admit(load_manifest(afc.write_manifest(data)), "file:///x", RateCards())
    with ledger.tx():
        ledger.db.execute("UPDATE jobs SET status = 'succeeded' WHERE batch = 'b2'")
    yield ledger
    ledger.close()


def _plan(ledger: Ledger, ledger_url: str, sql: str, params: list) -> str:
    if ledger_url.startswith("postgresql"):
        return "\n".join(row[0] for row in ledger.db.execute("EXPLAIN " + sql, params))
    conn = sqlite3.connect(ledger_url)
    try:
        return " | ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
    finally:
        conn.close()


@pytest.mark.parametrize("lookup", ["unfinished_batches", "host_id_sharers"])
def test_a_worker_start_looks_each_batch_up_never_every_job(
    two_batches, ledger_url, monkeypatch, lookup
):
    sent = recorded_statements(two_batches, monkeypatch)
    found = getattr(two_batches, lookup)()
    monkeypatch.undo()
    assert found == (["b1"] if lookup == "unfinished_batches" else [])
    sql, params = next((q, p) for q, p in sent if "FROM jobs" in q)
    plan = _plan(two_batches, ledger_url, sql, params)
    assert "Seq Scan on jobs" not in plan, plan
    assert "SCAN jobs" not in plan and "SCAN j " not in plan + " ", plan
