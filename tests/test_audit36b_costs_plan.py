"""'afc costs report --batch B' (and 'afc report --html --batch B''s spend) looks up the
attempts of the batch's jobs in the attempts (job_id, provider, number) index, whatever
PostgreSQL's statistics say (``Ledger.cost_groups``).

Joined to the batch's jobs, ``attempts`` was read whole: on a ledger whose attempts were never
analyzed (344 attempts a job estimated), the server took a hash join over a scan of every
attempt for cheaper than a look-up a job, and with a 5,000-job batch it did so after ANALYZE
too; the calls in flight (``status = 'started'``, no index) were found by a second scan of
every attempt. 100,100 jobs in 20 batches, never analyzed: 70 ms of server time for a 100-job
batch's report (2 ms now), 95 ms for a 5,000-job batch's (61 ms now). The attempts are now a LATERAL look-up a job on PostgreSQL,
which no estimate turns into a scan; SQLite's plan drove from the jobs already.
"""

from __future__ import annotations

import sqlite3

import pytest
from conftest import jobs, manifest, recorded_statements

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest

psycopg = pytest.importorskip("psycopg")


@pytest.fixture(params=["never analyzed", "analyzed"])
def ledger(request, ledger_url, afc):
    """A 20-job batch among 2,020 jobs, two attempts a job, one of them a call in flight."""
    ledger = Ledger(ledger_url)
    for batch, n in (("big", 2000), ("b1", 20)):
        data = manifest(jobs(n), batch=batch)
        ledger.admit(load_manifest(afc.write_manifest(data)), "file:///x", RateCards())
    with ledger.tx():
        ledger.db.execute(
            "INSERT INTO attempts (job_id, number, chain_index, provider, model, status,"
            " started_at, cost_micros) SELECT j.id, n.column1, 0, 'local', 'm1',"
            " CASE WHEN n.column1 = 1 THEN 'failed' ELSE 'started' END, 86400 * n.column1,"
            " 1000 * n.column1 FROM jobs j, (VALUES (1), (2)) n"
        )
    if request.param == "analyzed":
        ledger.db.execute("ANALYZE")
    yield ledger
    ledger.close()


def _sent(ledger: Ledger, monkeypatch, by: str) -> list[tuple[str, list]]:
    """The statements of ``cost_groups`` over the attempts, with their values."""
    sent = recorded_statements(ledger, monkeypatch)
    try:
        ledger.cost_groups(by, batch="b1", since=None)
    finally:
        monkeypatch.undo()
    return [(q, p) for q, p in sent if "attempts" in q]


@pytest.mark.parametrize("by", ["provider", "model", "batch", "day"])
def test_a_batchs_costs_look_up_its_jobs_attempts_never_every_attempt(
    ledger, ledger_url, monkeypatch, by
):
    statements = _sent(ledger, monkeypatch, by)
    assert len(statements) == 2  # the figures, and the calls in flight
    for sql, params in statements:
        if ledger_url.startswith("postgresql"):
            plan = "\n".join(row[0] for row in ledger.db.execute("EXPLAIN " + sql, params))
            assert "Seq Scan on attempts" not in plan, plan
            assert "Seq Scan on jobs" not in plan, plan
        else:
            conn = sqlite3.connect(ledger_url)
            rows = conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
            conn.close()
            plan = " | ".join(row[3] for row in rows)
            assert "SCAN a" not in plan and "SCAN attempts" not in plan, plan
            assert "SCAN j" not in plan and "SCAN jobs" not in plan, plan


def test_a_batchs_figures_are_its_own(ledger):
    # each job: a failed attempt of $0.001, and a call in flight of $0.002 whose run is gone
    b1 = ledger.cost_groups("provider", batch="b1", since=None)
    figures = {"priced": 60000, "unpriced_attempts": 0, "failed_spend": 60000}
    assert b1 == {"local": {**figures, "unknown_attempts": 20}}
    whole = ledger.cost_groups("batch", batch=None, since=None)
    assert whole["b1"] == b1["local"]
    assert whole["big"]["priced"] == 2000 * 3000
    days = ledger.cost_groups("day", batch="b1", since=None)
    assert sorted(days) == ["1970-01-02", "1970-01-03"]
    assert days["1970-01-03"]["unknown_attempts"] == 20
    assert ledger.cost_groups("model", batch="b1", since=86400 * 2) == {
        "local/m1": {
            "priced": 40000,
            "unpriced_attempts": 0,
            "failed_spend": 40000,
            "unknown_attempts": 20,
        }
    }
