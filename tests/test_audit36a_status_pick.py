"""A batch's job listing with its costs (a run's summary, ``afc status``: ``Ledger.status_rows``,
``status_rows_of``) picks its jobs in the (batch, status) index or by id whatever PostgreSQL's
statistics say.

Picked in one query with the five look-ups a job in ``attempts``, on a ledger whose
``attempts`` was never analyzed (345 attempts a job estimated), the look-ups' estimate made a
parallel scan of every job of the ledger look cheaper than the index (the server divides a
parallel plan's per-row cost among its workers, though it made the look-ups in one process):
a 100-job batch among 100,000 jobs in 20 batches took 46 ms, where the index took 2 ms, and
'afc resume''s list of the failed jobs of every batch 106 ms. The jobs are now picked apart
(a MATERIALIZED CTE, planned alone).

The test ledger is small: the server's thresholds for a parallel scan (8 MB of table, the
cost of starting workers) are lowered to those of a large one.
"""

from __future__ import annotations

import sqlite3

import pytest
from conftest import jobs, manifest, recorded_statements

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest

psycopg = pytest.importorskip("psycopg")

LARGE = (
    "SET min_parallel_table_scan_size = 0",
    "SET parallel_setup_cost = 0",
    "SET parallel_tuple_cost = 0",
)


def _sent_by(ledger: Ledger, monkeypatch, call) -> tuple[str, list]:
    """The listing statement ``call(ledger)`` sends, with its values."""
    sent = recorded_statements(ledger, monkeypatch)
    try:
        call(ledger)
    finally:
        monkeypatch.undo()
    return next((q, p) for q, p in sent if "AS unpriced_attempts" in q)


@pytest.fixture
def admitted(ledger_url, afc):
    ledger = Ledger(ledger_url)
    ledger.admit(load_manifest(afc.write_manifest(manifest(jobs(2000)))), "file:///x", RateCards())
    ids = [row[0] for row in ledger.db.execute("SELECT id FROM jobs LIMIT 3").fetchall()]
    with ledger.tx():  # five attempts a job, never analyzed: a ledger's first hour
        ledger.db.execute(
            "INSERT INTO attempts (job_id, number, chain_index, provider, model, status,"
            " started_at, cost_micros) SELECT j.id, n.column1, 0, 'local', 'instant',"
            " 'succeeded', 0, 1000 * n.column1 FROM jobs j, (VALUES (1), (2), (3), (4), (5)) n"
        )
    yield ledger, ids
    ledger.close()


CALLS = {
    "a batch": lambda ledger: ledger.status_rows("b1"),
    "the failed jobs of every batch": lambda ledger: ledger.status_rows(None, ("failed", "dead")),
    "jobs by id": lambda ledger: ledger.status_rows_of(["x", "y"]),
}


@pytest.mark.parametrize("what", CALLS)
def test_the_listing_picks_its_jobs_from_an_index_never_from_every_job(
    admitted, ledger_url, monkeypatch, what
):
    ledger, _ = admitted
    sql, params = _sent_by(ledger, monkeypatch, CALLS[what])
    if ledger_url.startswith("postgresql"):
        for setting in LARGE:
            ledger.db.execute(setting)
        plan = "\n".join(row[0] for row in ledger.db.execute("EXPLAIN " + sql, params))
        assert "Seq Scan on jobs" not in plan, plan
        assert "Parallel" not in plan, plan
    else:
        conn = sqlite3.connect(ledger_url)
        plan = " | ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
        conn.close()
        assert "SCAN j_1" not in plan and "SCAN jobs" not in plan, plan


def test_the_listing_gives_each_job_with_its_cost(admitted):
    ledger, ids = admitted
    rows = {row["id"]: row for row in ledger.status_rows("b1")}
    assert len(rows) == 2000
    assert {row["cost_micros"] for row in rows.values()} == {15000}
    assert {row["attempts"] for row in rows.values()} == {5}
    assert [row["id"] for row in ledger.status_rows_of(ids[::-1])] == ids[::-1]
    assert ledger.status_rows(None, ("failed", "dead")) == []
