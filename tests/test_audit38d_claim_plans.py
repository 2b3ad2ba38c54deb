"""A worker's claim over every batch (m018, ``core._claim_scope``) as the engines plan it for a
worker: on PostgreSQL the generic plan the server may keep for the connection's life once
psycopg prepared the statement (its fifth use), with the parameter types psycopg sent; on
SQLite with and without ``ANALYZE`` having run (``sqlite_stat1``), before and after the
leases. The ledger holds 200 batches of finished jobs beside one live batch: each of the four
statements a claim sends (settle's blocked jobs, the free jobs' CTE, the expired leases, this
host's owners) reads only the partial index of the few jobs it looks at, never every job nor
a look-up per batch, and sorts nothing but those few jobs."""

from __future__ import annotations

import re
import sqlite3

import pytest
from conftest import jobs, manifest, recorded_statements

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest

psycopg = pytest.importorskip("psycopg")

# words of each statement a claim sends -> the partial index it must read
READS = {
    "j.status = 'blocked'": "jobs_blocked_order",
    "AS MATERIALIZED": "jobs_claim_order",
    "lease_expires <": "jobs_leased_order",
    "substr(lease_owner": "jobs_leased_order",
}
OLD, COPIES = "old", 200


def _grow(url: str, copies: int) -> None:
    """Batch OLD (finished jobs) copied ``copies`` times, in SQL."""
    if url.startswith("postgresql"):
        conn = psycopg.connect(url, autocommit=True)
        names = [
            r[0]
            for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'jobs'"
                " ORDER BY ordinal_position"
            )
        ]
        many = "generate_series(1, %s) AS n(i)"
    else:
        conn = sqlite3.connect(url)
        names = [r[1] for r in conn.execute("PRAGMA table_info(jobs)")]
        many = (
            "(WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
            " SELECT i FROM n) AS n"
        )
    shifted = {"id": "t.id || '-' || n.i", "batch": f"'{OLD}-' || n.i"}
    shifted["output_key"] = f"'{OLD}-' || n.i || t.key"
    picked = ", ".join(shifted.get(c, f"t.{c}") for c in names)
    with conn:
        conn.execute(
            "INSERT INTO batches (name, storage, rates_json, created_at, updated_at)"
            f" SELECT '{OLD}-' || n.i, storage, rates_json, created_at, updated_at"
            f" FROM batches, {many} WHERE name = '{OLD}'",
            (copies,),
        )
        conn.execute(
            f"INSERT INTO jobs ({', '.join(names)}) SELECT {picked}"
            f" FROM jobs t, {many} WHERE t.batch = '{OLD}'",
            (copies,),
        )
    conn.close()


def _analyze(url: str) -> None:
    if url.startswith("postgresql"):
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ANALYZE")
    else:
        conn = sqlite3.connect(url)
        conn.execute("ANALYZE")
        conn.commit()
        conn.close()


def _literal(value: object) -> str:
    """``value`` written into SQL text (a claim's skip list is an array parameter)."""
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, list):
        return f"ARRAY[{', '.join(map(_literal, value))}]"
    return repr(value)


def _plan(url: str, sql: str, params: list) -> str:
    """PostgreSQL: the generic plan of ``sql`` prepared with the parameter types psycopg sends
    (as a worker's connection has it); SQLite: EXPLAIN QUERY PLAN."""
    if not url.startswith("postgresql"):
        conn = sqlite3.connect(url)
        try:
            return " | ".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
        finally:
            conn.close()
    from afc_cli.ledger.postgres import translate

    with psycopg.connect(url) as conn:
        conn.execute(translate(sql), params, prepare=True)
        (types,) = conn.execute(
            "SELECT parameter_types FROM pg_prepared_statements WHERE name LIKE '_pg3%%'"
        ).fetchone()
        conn.rollback()  # nothing claimed
        conn.execute("SET plan_cache_mode = force_generic_plan")
        numbers = iter(range(1, len(params) + 1))
        numbered = re.sub(r"\?", lambda _: f"${next(numbers)}", sql)
        conn.execute(f"PREPARE probe ({', '.join(map(str, types))}) AS {numbered}")
        values = ", ".join(map(_literal, params))
        plan = "\n".join(r[0] for r in conn.execute(f"EXPLAIN EXECUTE probe ({values})"))
        conn.rollback()
    return plan


def _history(url: str, afc) -> None:
    """The ledger at ``url`` with a past: batch ``OLD``'s 50 jobs ended, copied ``COPIES``
    times (``_grow``)."""
    ledger = Ledger(url)
    try:
        m = manifest(jobs(50), batch=OLD)
        ledger.admit(load_manifest(afc.write_manifest(m)), "file:///x", RateCards())
        with ledger.tx():
            ledger.db.execute(f"UPDATE jobs SET status = 'succeeded' WHERE batch = '{OLD}'")
    finally:
        ledger.close()
    _grow(url, COPIES)


@pytest.mark.parametrize("analyzed", ["never", "before the leases", "after the leases"])
def test_a_claim_over_every_batch_reads_only_its_partial_indexes(
    ledger_url, afc, monkeypatch, analyzed
):
    _history(ledger_url, afc)
    if analyzed == "before the leases":
        _analyze(ledger_url)
    ledger = Ledger(ledger_url)
    try:
        m = manifest(jobs(60), batch="zlive")
        ledger.admit(load_manifest(afc.write_manifest(m)), "file:///x", RateCards())
        with ledger.tx():
            ledger.db.execute(
                "UPDATE jobs SET status = 'blocked' WHERE batch = 'zlive' AND seq >= 50"
            )
        assert len(ledger.claim_runnable(20, 300)) == 20  # leased by this worker
        if analyzed == "after the leases":
            _analyze(ledger_url)
        ledger._here_checked = 0  # this host's dead runs' jobs are looked for too
        sent = recorded_statements(ledger, monkeypatch)
        # room left after the free jobs: the expired leases are looked for too
        assert len(ledger.claim_runnable(5000, 300, skip=["x1", "x2"])) == 40
    finally:
        ledger.close()
    for words, index in READS.items():
        sql, params = next((q, p) for q, p in sent if words in q)
        plan = _plan(ledger_url, sql, params)
        assert index in plan, plan
        assert "jobs_batch_status" not in plan and "batches" not in plan, plan
        assert "Seq Scan on jobs" not in plan and "SCAN jobs |" not in plan + " |", plan
        if words != "substr(lease_owner":
            # in claim order from the index; this host's owners' look reads every leased
            # job unordered then sorts them when the server knows nothing of them (a few)
            assert "Sort" not in plan and "TEMP B-TREE" not in plan, plan


def test_a_claim_of_one_batch_reads_it_in_claim_order_from_the_partial_indexes(
    pg_url, afc, monkeypatch
):
    """'afc worker --batch NAME' on PostgreSQL: the batch named as ``batch = $1`` (the
    column's default collation) could not be a condition on m017's and m018's indexes, which
    are in code point order (``batch COLLATE "C"``). Once the server kept the generic plan (at
    a worker's tenth claim or so), its estimate of a batch's rows was the average batch's, and
    each claim read every unfinished job of the batch through the (batch, status) index and
    sorted them: 26 ms a claim of 64 with 20,000 jobs queued in one batch beside 400 finished
    batches, where the claims before it took 2.6 ms, growing with the batch's queue."""
    _history(pg_url, afc)
    ledger = Ledger(pg_url)
    try:
        m = manifest(jobs(3000), batch="zbig")
        ledger.admit(load_manifest(afc.write_manifest(m)), "file:///x", RateCards())
        with ledger.tx():
            ledger.db.execute("UPDATE jobs SET status = 'blocked' WHERE seq >= 2990")
        assert len(ledger.claim_runnable(20, 300, batch="zbig")) == 20
        _analyze(pg_url)
        ledger._here_checked = 0
        sent = recorded_statements(ledger, monkeypatch)
        taken = ledger.claim_runnable(5000, 300, batch="zbig", skip=["x1"])
        assert len(taken) == 2980
        assert [job["seq"] for job in taken[:2]] == [20, 21]  # admission order
    finally:
        ledger.close()
    for words, index in READS.items():
        sql, params = next((q, p) for q, p in sent if words in q)
        plan = _plan(pg_url, sql, params)
        assert f"Index Scan using {index}" in plan, plan
        assert "Index Cond: ((batch)::text = $" in plan, plan  # the batch, in claim order
        assert not re.search(r"Sort Key: \(\((\w+\.)?batch\)", plan), plan  # nor sorted
