"""Thirty-ninth session (a): review gates, needs and chains at catalogue scale."""

from __future__ import annotations

import json

import pytest


def _gated(n: int, extra: list | None = None) -> list[dict]:
    """A style frame awaiting review and ``n`` shots that need it (then ``extra``)."""
    listed = [{"key": "style-frame", "prompt": "harbour", "review": True}]
    listed += [
        {"key": f"shot-{i:04d}", "prompt": f"s{i}", "needs": ["style-frame"]} for i in range(n)
    ]
    return listed + (extra or [])


def _count_scrubs(monkeypatch, *modules) -> list[str]:
    """The texts ``secrets.scrub`` is asked to scrub from now on, as ``modules`` call it."""
    from afc_cli import secrets

    scrubbed: list[str] = []
    scrub = secrets.scrub

    def counted(text, **kw):
        scrubbed.append(text)
        return scrub(text, **kw)

    for module in (secrets, *modules):
        monkeypatch.setattr(module, "scrub", counted)
    return scrubbed


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_a_rejected_gate_s_dependents_are_read_in_a_few_queries_not_one_each(
    afc, monkeypatch, request, engine
):
    """A style frame rejected before a batch of shots fails every shot (and each title card
    needing two shots) DEPENDENCY_FAILED, for ever: a rejection is final. Each later
    'afc resume' and 'afc queue stats' asks of every such job whether it failed only because
    of a person's decision (``run.follow_decisions``), and read each one's needs with a query
    of its own: 50,000 queries at 50,000 shots, on every cron'd resume or alert check (2 s on
    SQLite; on PostgreSQL 2.2 s at 10,000 shots, 11 s at 50,000). The needs are read a chunk
    of jobs per query; the answers are as before."""
    from conftest import manifest

    from afc_cli import ops, run
    from afc_cli.ledger.core import Ledger

    n = 1200  # more than one IN chunk (core.IN_CHUNK)
    titles = [
        {
            "key": f"title-{i:04d}",
            "prompt": f"t{i}",
            "needs": [f"shot-{i:04d}", f"shot-{i + 1:04d}"],
        }
        for i in range(0, 20, 2)
    ]
    afc.write_manifest(manifest(_gated(n, titles)))
    ledger = str(afc.cwd / "afc.db")
    env = {}
    if engine == "postgresql":
        ledger = request.getfixturevalue("pg_url")
        env = {"AFC_LEDGER": ledger}
    assert afc("submit", "manifest.yaml", env=env).returncode == 0
    assert afc("review", "reject", "style-frame", "--reason", "too cold", env=env).returncode == 0

    queries = []
    execute = Ledger._all
    monkeypatch.setattr(
        Ledger, "_all", lambda self, *a, **k: queries.append(a[0]) or execute(self, *a, **k)
    )
    stats, _ = ops.queue_stats(ledger)
    assert (stats["failed"], stats["stuck"]) == (n + 10, 0), stats
    assert len(queries) < 50, len(queries)  # was one per failed dependent

    queries.clear()
    result = run.resume(ledger_path=ledger, batch=None, storage=None, concurrency=2)
    assert (result.stuck, result.exit_code) == ([], 0)
    assert len(queries) < 50, len(queries)


def test_a_gate_s_rejection_scrubs_its_dependents_few_texts_once_not_for_each(afc, monkeypatch):
    """A rejected (or cancelled) style frame fails every blocked shot behind it, each with
    the same message and event, in the decision's one transaction, which holds SQLite's
    write lock. Each shot's message and event detail were scrubbed anew (nine scrubs a shot,
    half of the decision): 100,000 shots held the lock 41 s, and a submit meanwhile failed
    'database is locked' after its 30 s busy timeout. A walk scrubs each distinct text once
    (26 s there; 1.6 s instead of 3.2 s at 10,000); what is written is as before."""
    from conftest import manifest

    from afc_cli import review
    from afc_cli.ledger import core
    from afc_cli.ledger.core import Ledger

    n = 300
    title = {"key": "title", "prompt": "t", "needs": ["shot-0000", "shot-0001"]}
    afc.write_manifest(manifest(_gated(n, [title])))
    assert afc("submit", "manifest.yaml").returncode == 0

    scrubbed = _count_scrubs(monkeypatch, core)
    ledger = Ledger(str(afc.cwd / "afc.db"))
    try:
        review.reject(ledger, ["style-frame"], by="tester", reason="too cold")
    finally:
        ledger.close()
    assert len(scrubbed) < 40, len(scrubbed)  # was 9 a dependent (2,718)

    rows = afc.rows(
        "SELECT j.key, j.status, j.error_code, j.error_message, e.detail_json FROM jobs j"
        " JOIN events e ON e.job_id = j.id AND e.kind = 'failed' ORDER BY j.seq"
    )
    assert len(rows) == n + 1
    assert {row[1:3] for row in rows} == {("failed", "DEPENDENCY_FAILED")}
    assert rows[0][3].startswith("need 'style-frame' ended rejected, so this job was not")
    assert rows[-1][3].startswith("need 'shot-0000' ended failed, itself DEPENDENCY_FAILED")
    assert json.loads(rows[-1][4])["error_message"] == rows[-1][3]


def test_a_gate_s_cancel_and_retry_scrub_their_dependents_few_texts_once(afc, monkeypatch):
    """'afc cancel' of a style frame fails the shots behind it, and 'afc retry' of it puts
    them back to blocked (``_reblock_dependents``), each with its 'retried' event: the retry
    scrubbed six texts a shot anew (7.5 s at 50,000 shots, 60% of it scrubbing), as the
    cancel did nine. Each walk scrubs each distinct text once."""
    from conftest import manifest

    from afc_cli.ledger import core

    n = 300
    afc.write_manifest(manifest(_gated(n)))
    assert afc("submit", "manifest.yaml").returncode == 0

    scrubbed = _count_scrubs(monkeypatch, core)
    for verb in ("cancel", "retry"):
        scrubbed.clear()
        ledger = core.Ledger(str(afc.cwd / "afc.db"))
        try:
            (job,) = [j for j in ledger.jobs_by_key("style-frame") if j["batch"] == "b1"]
            if verb == "cancel":
                assert ledger.cancel(job, reason="stop")
            else:
                assert ledger.retry(job, by="tester")
        finally:
            ledger.close()
        assert len(scrubbed) < 40, (verb, len(scrubbed))
    counts = dict(afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status"))
    assert counts == {"queued": 1, "blocked": n}, counts
    retried = afc.rows("SELECT COUNT(*) FROM events WHERE kind = 'retried'")
    assert retried == [(n + 1,)]


def test_a_table_s_rows_scrub_each_distinct_text_once(monkeypatch):
    """'afc status' of a gated batch prints 10,000 rows that repeat their column names and
    most values (blocked, probe, 0.000000, 'waiting for 1 need: style-frame'). Each row was
    scrubbed with a memo of its own (``tables.emit``): eighteen scrubs a row, 90% of the
    command (2.2 s at 10,000 jobs, 10 s at 50,000; 1.1 s and 3.1 s now). The rows share one
    memo, bounded as ``emit_json``'s is; a secret in a repeated value is still scrubbed."""
    import io

    from afc_cli import tables

    scrubbed = _count_scrubs(monkeypatch)
    token = "sk-" + "a1B2" * 12
    rows = [
        {
            "key": f"shot-{i:04d}",
            "status": "blocked",
            "step": "probe",
            "cost": "0.000000",
            "reason": f"waiting for 1 need: style-frame (hook https://u:{token}@h.invalid)",
        }
        for i in range(1000)
    ]
    columns = [tables.Col(name) for name in ("key", "status", "step", "cost", "reason")]
    out = io.StringIO()
    tables.emit(iter(rows), columns, stream=out)
    assert len(scrubbed) < 1100, len(scrubbed)  # was 10 a row
    lines = out.getvalue().splitlines()
    assert len(lines) == 1001 and token not in out.getvalue()
    assert lines[1].startswith("shot-0000\tblocked\tprobe\t0.000000\twaiting for 1 need")
