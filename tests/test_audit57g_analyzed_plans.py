"""Outside audit 57g: once a user ran ``ANALYZE`` on a SQLite ledger (as a DBA does to any
database, and as ``sqlite3``'s ``.expert`` suggests), queries that look every batch's jobs up
by status read every job of the ledger instead. The statistics count the rows of an average
(batch, status) of the index, and a ledger's are mostly one finished status's: looked up in
every batch for a few statuses, they add up to the table, and the planner scanned it. 'afc
resume' and 'afc worker' ask whether any webhook is to be sent at every start and poll
(``has_webhooks``): 0.27 s on a 120,000-job ledger so analyzed, 0.04 s without statistics.
Each batch is now looked up in turn, a plan the statistics do not change. Checked as the
plan of each statement sent, after ``ANALYZE``, on a ledger whose few unfinished jobs are
among many finished ones."""

from __future__ import annotations

import sqlite3

from conftest import jobs, manifest

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest


def _analyzed(path: str, afc, monkeypatch, *, unfinished: str) -> None:
    """Three batches of 30 jobs with a webhook, all succeeded but one ``unfinished``; then
    ``ANALYZE``."""
    monkeypatch.setenv("HOOK_SECRET", "whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=")
    hook = {"url": "http://127.0.0.1:9/h", "secret_env": "HOOK_SECRET"}
    ledger = Ledger(path)
    try:
        for b in range(3):
            m = load_manifest(afc.write_manifest(manifest(jobs(30), batch=f"b{b}", webhook=hook)))
            ledger.admit(m, "file:///tmp/x", RateCards())
        with ledger.tx():
            ledger.db.execute("UPDATE jobs SET status = 'succeeded'")
            ledger.db.execute(
                "UPDATE jobs SET status = ? WHERE batch = 'b1' AND key = 'shot-007'",
                (unfinished,),
            )
    finally:
        ledger.close()
    conn = sqlite3.connect(path)
    conn.execute("ANALYZE")
    conn.commit()
    conn.close()


def _scans(path: str, monkeypatch, look) -> tuple[object, list[str]]:
    """What ``look(ledger)`` gives, and the plan lines of its statements that read the
    jobs table whole."""
    sent: list[str] = []
    connect = sqlite3.connect

    def traced(*args, **kwargs):
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(sent.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced)
    ledger = Ledger(path, create=False, reading=True)
    try:
        result = look(ledger)
    finally:
        ledger.close()
        monkeypatch.setattr(sqlite3, "connect", connect)
    conn = sqlite3.connect(path)
    scans = []
    for sql in sent:
        if "jobs" not in sql or not sql.lstrip().upper().startswith(("SELECT", "WITH")):
            continue
        plan = conn.execute("EXPLAIN QUERY PLAN " + sql).fetchall()
        # the picked jobs' CTE ('MATERIALIZE j') is read whole by design: its rows are those
        # picked; a scan of the table inside it, or anywhere else, is the table read whole
        ctes = {row[0] for row in plan if row[3] == "MATERIALIZE j"}
        for _node, parent, _, line in plan:
            words = line.split()
            if words[0] == "SCAN" and (
                words[1] == "jobs" or (words[1] == "j" and (not ctes or parent in ctes))
            ):
                scans.append(f"{line} in {sql[:160]}")
    conn.close()
    return result, scans


def test_has_webhooks_looks_batches_up_after_analyze(tmp_path, afc, monkeypatch):
    path = str(tmp_path / "l.db")
    _analyzed(path, afc, monkeypatch, unfinished="queued")
    found, scans = _scans(path, monkeypatch, Ledger.has_webhooks)
    assert found is True
    assert scans == []
    other = str(tmp_path / "other.db")
    _analyzed(other, afc, monkeypatch, unfinished="failed")
    found, scans = _scans(other, monkeypatch, Ledger.has_webhooks)
    assert found is False
    assert scans == []


def test_status_of_every_batch_looks_batches_up_after_analyze(tmp_path, afc, monkeypatch):
    """'afc status' of the whole ledger (the jobs needing attention, or those of a --status)
    had its jobs read whole: 0.98 s on a 120,000-job ledger so analyzed, 0.26 s without."""
    from afc_cli.listing import QUIET, STATUSES

    path = str(tmp_path / "l.db")
    _analyzed(path, afc, monkeypatch, unfinished="failed")
    shown = tuple(s for s in STATUSES if s not in QUIET)
    rows, scans = _scans(path, monkeypatch, lambda ledger: ledger.status_rows(None, shown))
    assert [(row["batch"], row["key"], row["status"]) for row in rows] == [
        ("b1", "shot-007", "failed")
    ]
    assert scans == []
    # a batch's, and the ledger's every job, as they were
    rows, _ = _scans(path, monkeypatch, lambda ledger: ledger.status_rows("b2", ("succeeded",)))
    assert len(rows) == 30 and {row["batch"] for row in rows} == {"b2"}
    rows, _ = _scans(path, monkeypatch, lambda ledger: ledger.status_rows(None, None))
    assert len(rows) == 90
