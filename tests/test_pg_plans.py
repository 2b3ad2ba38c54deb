"""The plans of a run's per-job look-ups. On PostgreSQL, as the server makes them for a
worker: before its statistics know the rows a run is writing, and kept. psycopg prepares a
statement at its fifth use on a connection, and the server may keep one generic plan of it for
the connection's life; a new ledger's statistics are those of empty tables until autovacuum's
next pass (a minute or more after a large admission).

Two such plans made the server's work grow with the ledger (``bench/postgres_workers.py``:
3 ms of server CPU a job at 10,000 instant jobs, where 1 ms had been measured): the output
key's holders read every attempt once a job, and a run's storage pre-check read every job of
the batch once per 64 ids. Each test asks the server for the generic plan of the statement a
run sends, on a ledger of 2,000 admitted jobs that was never analyzed.

A query over every batch (``_batch_scope``) looks each up in the (batch, status) index once
the admission that added a batch had ``batches`` counted (autovacuum never counts a table of a
few rows). A worker's claim, on both engines, reads the first free runnable jobs in its order from m017's
index, where it sorted every free runnable job of the ledger at each claim (12-16 ms a claim
of 64 with 10,000 jobs queued on PostgreSQL, growing with the queue).
"""

from __future__ import annotations

import re
import sqlite3

import pytest
from conftest import jobs, manifest, recorded_statements

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest

psycopg = pytest.importorskip("psycopg")


def _generic_plan(url: str, sql: str, params: list) -> str:
    """The server's generic plan of ``sql`` (``?`` placeholders) with these (text) values."""
    numbers = iter(range(1, len(params) + 1))
    numbered = re.sub(r"\?", lambda _: f"${next(numbers)}", sql)
    values = ", ".join("'" + str(v).replace("'", "''") + "'" for v in params)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE lookup ({', '.join(['text'] * len(params))}) AS {numbered}")
        return "\n".join(row[0] for row in conn.execute(f"EXPLAIN EXECUTE lookup ({values})"))


def _admitted(url: str, afc) -> Ledger:
    ledger = Ledger(url)
    ledger.admit(load_manifest(afc.write_manifest(manifest(jobs(2000)))), "file:///x", RateCards())
    return ledger


@pytest.fixture
def admitted(pg_url, afc):
    ledger = _admitted(pg_url, afc)
    yield ledger
    ledger.close()


def test_the_output_keys_holders_are_found_from_the_keys_index_not_from_the_attempts(
    admitted, pg_url
):
    from afc_cli.ledger.core import OUTPUT_HOLDERS_LOOKUP

    job = admitted.db.execute("SELECT id, output_key, batch FROM jobs LIMIT 1").fetchone()
    key, job_id, batch = job[1], job[0], job[2]
    plan = _generic_plan(pg_url, OUTPUT_HOLDERS_LOOKUP, [key, job_id, batch] * 4)
    assert "Seq Scan on jobs" not in plan, plan
    # the dead-lettered jobs with a request left, from m016's partial index, drive their
    # branch (a nested loop names its outer side first): their attempts are read for those
    # few jobs only, where the plan made before m016 read every attempt and then the jobs
    branch = plan[plan.index("InitPlan 4") :]
    assert "Index Scan using jobs_output_poll_left" in branch, plan
    assert branch.index("jobs_output_poll_left") < branch.index("on attempts"), plan


def test_the_storage_precheck_finds_its_jobs_by_id(admitted, pg_url, monkeypatch):
    ids = [row[0] for row in admitted.db.execute("SELECT id FROM jobs LIMIT 64").fetchall()]
    sent = recorded_statements(admitted, monkeypatch)
    keys = admitted.output_keys("b1", ids)
    assert len(keys) == 64  # every job of the batch "b1"
    assert admitted.output_keys("another batch", ids) == []
    sql, params = sent[0]
    plan = _generic_plan(pg_url, sql, params)
    assert "jobs_pkey" in plan, plan
    assert "jobs_batch_status" not in plan, plan  # not every job of the batch, per 64 ids


def test_a_claim_reads_the_free_runnable_jobs_in_its_order_from_their_index(
    ledger_url, afc, monkeypatch
):
    ledger = _admitted(ledger_url, afc)
    try:
        assert len(ledger.claim_runnable(64, 300)) == 64
        sent = recorded_statements(ledger, monkeypatch)
        taken = ledger.claim_runnable(64, 300, skip=["a job this worker runs"])
        assert [job["seq"] for job in taken] == list(range(64, 128))  # admission order
        sql, params = next((q, p) for q, p in sent if "AS MATERIALIZED" in q)
    finally:
        ledger.close()
    if ledger_url.startswith("postgresql"):
        with psycopg.connect(ledger_url) as conn:
            cursor = psycopg.ClientCursor(conn)
            cursor.execute("EXPLAIN " + sql.replace("%", "%%").replace("?", "%s"), params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
        assert "Index Scan using jobs_claim_order" in plan, plan
        assert "Sort" not in plan, plan
    else:
        conn = sqlite3.connect(ledger_url)
        plan = " ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
        conn.close()
        assert "USING INDEX jobs_claim_order" in plan, plan
        assert "TEMP B-TREE" not in plan, plan


def test_a_query_over_every_batch_looks_each_batch_up_in_the_status_index(admitted, pg_url):
    """``batch IN (SELECT name FROM batches)`` is a lookup per batch only if the planner
    knows the batches are few: autovacuum never counts a table of a few rows, and the server
    took ``batches`` for 340 rows and read the whole (batch, status) index at each claim. An
    admission that adds a batch has it counted (``batches_grew``)."""
    from afc_cli.ledger.core import _batch_scope

    scope, _ = _batch_scope(None, "j.batch")
    sql = f"SELECT j.id FROM jobs j WHERE {scope} AND j.status = 'queued'"
    with psycopg.connect(pg_url) as conn:
        plan = "\n".join(row[0] for row in conn.execute("EXPLAIN " + sql))
    assert "Hash Join" not in plan, plan
    assert "Index Cond: ((batch = batches.name) AND (status = 'queued'::text))" in plan, plan


def _plan(url: str, sql: str, params: list) -> str:
    """The plan either engine makes for ``sql`` (``?`` placeholders) with these values."""
    if url.startswith("postgresql"):
        with psycopg.connect(url) as conn:
            cursor = psycopg.ClientCursor(conn)
            cursor.execute("EXPLAIN " + sql.replace("%", "%%").replace("?", "%s"), params)
            return "\n".join(row[0] for row in cursor.fetchall())
    conn = sqlite3.connect(url)
    try:
        return " ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
    finally:
        conn.close()


def test_a_claim_over_every_batch_reads_the_jobs_it_looks_at_from_their_indexes(
    ledger_url, afc, monkeypatch
):
    """A worker's claim (no batch named) looked for leases to take over, this host's dead
    runs' jobs and blocked jobs that may go on through the (batch, status) index, a look-up
    per batch and status ever admitted: a ledger kept for months, a batch every few minutes,
    made each idle poll slower by the batch (2.5 ms of SQLite, 7.5 ms of PostgreSQL server
    time at 500 batches; 0.07 ms now). They are read from m017's and m018's partial indexes
    in claim order, which hold the jobs a claim looks at alone."""
    ledger = Ledger(ledger_url)
    try:
        for b in range(40):
            m = manifest(jobs(50), batch=f"b{b:02d}")
            ledger.admit(load_manifest(afc.write_manifest(m)), "file:///x", RateCards())
        assert len(ledger.claim_runnable(64, 300)) == 64  # leased, by this worker
        ledger._here_checked = 0  # this host's dead runs' jobs are looked for too
        sent = recorded_statements(ledger, monkeypatch)
        # room left after the free jobs: the expired leases are looked for too
        assert len(ledger.claim_runnable(5000, 300, skip=["a job this worker runs"])) == 1936
    finally:
        ledger.close()
    reads = {
        "blocked": "jobs_blocked_order",
        "lease_expires <": "jobs_leased_order",
        "substr(lease_owner": "jobs_leased_order",
        "AS MATERIALIZED": "jobs_claim_order",
    }
    for words, index in reads.items():
        sql, params = next((q, p) for q, p in sent if words in q)
        plan = _plan(ledger_url, sql, params)
        assert index in plan, plan
        assert "jobs_batch_status" not in plan and "batches" not in plan, plan
