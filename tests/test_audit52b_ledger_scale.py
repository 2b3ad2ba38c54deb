"""Outside audit 52b: the ledger's statements on a ledger kept for a year (1,000,000 jobs in
100 batches, 3,000,000 attempts, 2,200,000 events, 500,000 webhook deliveries), on both
engines. Each test asks the engine for the plan of a statement afc sends (recorded as a
ledger operation sends it) and checks that it is read from an index, not from a scan of a
table that grows with every batch. PostgreSQL is asked with ``enable_seqscan`` off: on the
few rows of a test the server may rightly prefer a scan, and what is checked is that the
index can answer the statement at all (without it the plan is still a scan)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from conftest import jobs, manifest, recorded_statements

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest


def _plan(ledger: Ledger, sql: str, params: list) -> str:
    """The engine's plan of ``sql`` with these values, one line a step."""
    if ledger.db.__class__.__name__ == "PgDatabase":
        ledger.db.execute("SET enable_seqscan = off")
        try:
            return "\n".join(row[0] for row in ledger.db.execute("EXPLAIN " + sql, params))
        finally:
            ledger.db.execute("RESET enable_seqscan")
    return "\n".join(row[-1] for row in ledger.db.execute("EXPLAIN QUERY PLAN " + sql, params))


@contextmanager
def _sent(ledger: Ledger, monkeypatch) -> Iterator[list]:
    """The statements the block sends, ``(sql, values)``, recorded until it ends."""
    sent = recorded_statements(ledger, monkeypatch)
    try:
        yield sent
    finally:
        monkeypatch.undo()


def _plans(ledger: Ledger, sent: list, chosen: Callable[[str], bool]) -> list[tuple[str, str]]:
    """Each ``chosen`` statement of ``sent`` with its plan (``_plan``)."""
    return [(sql, _plan(ledger, sql, params)) for sql, params in sent if chosen(sql)]


def _scans(plan: str, table: str) -> bool:
    """Whether the plan reads every row of ``table`` (PostgreSQL's, or SQLite's own words)."""
    return bool(re.search(rf"Seq Scan on {table}\b|^\s*SCAN {table}\s*$", plan, re.M))


def _admitted(ledger_url: str, afc, n: int = 4) -> tuple[Ledger, list]:
    ledger = Ledger(ledger_url)
    m = load_manifest(afc.write_manifest(manifest(jobs(n))))
    ledger.admit(m, "file:///tmp/x", RateCards())
    return ledger, m.jobs


def test_a_per_minute_limit_counts_the_last_minute_from_an_index(ledger_url, afc, monkeypatch):
    """``per_minute`` (``Ledger._check_limit``) counts the provider's attempts started in the
    last minute at each call's start, under the ledger's write lock. No index had the start
    time: each count read every attempt of the ledger, 0.68 s a call on SQLite and 0.77 s on
    PostgreSQL at 3,000,000 attempts, where a 10,000-job batch's run made 816 calls in
    ten minutes."""
    ledger, admitted = _admitted(ledger_url, afc)
    try:
        job = ledger.claim(admitted[0].job_id, 300)
        assert ledger.start_attempt(job, 0, "local", "m1", None, durable=False)
        with _sent(ledger, monkeypatch) as sent, ledger.tx():
            ledger._check_limit("local", None, 600)
        [(_, plan)] = _plans(ledger, sent, lambda sql: "started_at >" in sql)
        assert "attempts_per_minute" in plan, plan
        assert not _scans(plan, "attempts"), plan
    finally:
        ledger.close()


def test_a_whole_ledger_s_costs_are_not_read_in_the_per_minute_index(tmp_path, afc, monkeypatch):
    """SQLite reads a GROUP BY in the order of an index led by its column rather than sort:
    led by the provider, m023's index made ``afc costs report`` (by provider, of the whole
    ledger) a table look-up an attempt in provider order, 27 s where the scan took 10 s at
    3,000,000 attempts."""
    ledger, _ = _admitted(str(tmp_path / "afc.db"), afc)
    try:
        with _sent(ledger, monkeypatch) as sent:
            ledger.cost_groups("provider", batch=None, since=None)
        [(_, plan)] = _plans(ledger, sent, lambda sql: "SUM(a.cost_micros)" in sql)
        assert "attempts_per_minute" not in plan, plan
    finally:
        ledger.close()


def test_a_run_s_leases_are_renewed_and_released_from_an_index(ledger_url, afc, monkeypatch):
    """A run's lease renewal (every third of the lease, under the ledger's write lock) and its
    release at an interrupted end found the jobs it holds by scanning every job of the
    ledger: a renewal held the write lock 1.1 s on SQLite and took 1 s on PostgreSQL at
    1,000,000 jobs."""
    ledger, admitted = _admitted(ledger_url, afc)
    try:
        for job in admitted[:2]:
            assert ledger.claim(job.job_id, 300)
        with _sent(ledger, monkeypatch) as sent:
            ledger.renew_leases(300)
            ledger.release_all()
        by_owner = _plans(
            ledger,
            sent,
            lambda sql: (
                "FROM jobs WHERE lease_owner = ?" in sql
                or (sql.startswith("UPDATE jobs") and "WHERE lease_owner = ?" in sql)
            ),
        )
        # the renewal (on PostgreSQL its count of the rows held elsewhere too), the
        # release's read and its update
        assert len(by_owner) == (4 if ledger_url.startswith("postgresql") else 3), sent
        for sql, plan in by_owner:
            assert "jobs_lease_owner" in plan, (sql, plan)
            assert not _scans(plan, "jobs"), (sql, plan)
    finally:
        ledger.close()


def test_a_batch_s_avoided_renders_are_read_from_its_jobs(ledger_url, afc, monkeypatch):
    """``afc costs report --batch B`` (and ``afc report --html --batch B``, three times over)
    counted each job's first ``avoided`` row by grouping every row of the ledger, and the
    model of a stored output (``afc outputs``, the report's cards, review) read the whole
    table once a chunk of 500 jobs: ``avoided`` had no index. At 317,000 rows, a 10,000-job
    batch's report took 10.5 s more on SQLite, 4.5-14 s of PostgreSQL's time."""
    ledger, admitted = _admitted(ledger_url, afc)
    try:
        with ledger.tx():
            for job in admitted:
                ledger.db.execute(
                    "INSERT INTO avoided (job_id, batch, at, reason, provider, model,"
                    " cost_micros, cost_source) VALUES (?, 'b1', 0, 'stored', 'local', 'm1',"
                    " 10000, 'derived')",
                    (job.job_id,),
                )
        with _sent(ledger, monkeypatch) as sent:
            groups = ledger.cost_groups("provider", batch="b1", since=None)
            found = ledger._stored_models([job.job_id for job in admitted])
        assert groups["local"]["avoided_renders"] == len(admitted)
        assert len(found) == len(admitted)
        reads = _plans(ledger, sent, lambda sql: "FROM avoided" in sql)
        assert len(reads) == 2, sent
        for sql, plan in reads:
            assert "avoided_job" in plan, (sql, plan)
            assert not _scans(plan, "avoided"), (sql, plan)
    finally:
        ledger.close()


def test_a_job_s_deliveries_are_read_from_an_index(ledger_url, afc, monkeypatch):
    """``afc show KEY`` reads the job's webhook deliveries: found by scanning the whole outbox
    (a row per job event of every batch that posts webhooks, kept once delivered), 0.24 s
    on SQLite (2 s from a cold page cache) and 0.26-0.7 s on PostgreSQL at 500,000 rows."""
    ledger, admitted = _admitted(ledger_url, afc)
    try:
        with _sent(ledger, monkeypatch) as sent:
            assert ledger.job_deliveries(admitted[0].job_id) == []
        [(_, plan)] = _plans(ledger, sent, lambda sql: "FROM deliveries" in sql)
        assert "deliveries_job" in plan, plan
        assert not _scans(plan, "deliveries"), plan
    finally:
        ledger.close()


def test_a_batch_s_cancel_reads_its_cancelled_jobs_attempts_only(tmp_path, afc, monkeypatch):
    """``afc cancel --batch B`` looks for the batch's cancelled jobs with a request left at a
    provider (``Ledger.cancelled_with_requests``): asked as ``id IN`` the list of every such
    attempt of the ledger, SQLite read every attempt (1.3 s at 3,000,000 attempts, 7 s from
    a cold page cache). PostgreSQL made it a semi-join from the batch's jobs already."""
    ledger, admitted = _admitted(str(tmp_path / "afc.db"), afc)
    try:
        job = ledger.claim(admitted[0].job_id, 300)
        assert ledger.start_attempt(job, 0, "local", "m1", None, durable=False)
        with ledger.tx():
            ledger.db.execute(
                "UPDATE attempts SET provider_request_id = 'r1' WHERE job_id = ?", (job["id"],)
            )
            ledger.db.execute(
                "UPDATE jobs SET status = 'cancelled', lease_owner = NULL WHERE id = ?",
                (job["id"],),
            )
        with _sent(ledger, monkeypatch) as sent:
            assert [row["id"] for row in ledger.cancelled_with_requests("b1")] == [job["id"]]
        [(_, plan)] = _plans(ledger, sent, lambda sql: "FROM attempts" in sql)
        assert not _scans(plan, "attempts"), plan
    finally:
        ledger.close()
