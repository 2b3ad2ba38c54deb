"""Thirty-ninth session (a): review gates, needs and chains at catalogue scale."""

from __future__ import annotations

import pytest


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
    listed = [{"key": "style-frame", "prompt": "harbour", "review": True}]
    listed += [
        {"key": f"shot-{i:04d}", "prompt": f"s{i}", "needs": ["style-frame"]} for i in range(n)
    ]
    listed += [
        {
            "key": f"title-{i:04d}",
            "prompt": f"t{i}",
            "needs": [f"shot-{i:04d}", f"shot-{i + 1:04d}"],
        }
        for i in range(0, 20, 2)
    ]
    afc.write_manifest(manifest(listed))
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
