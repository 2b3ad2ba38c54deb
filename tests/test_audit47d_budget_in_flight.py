"""A job the budget refused asks what the calls still in flight reserve, which may come back
free and leave it room (``pipeline._may_make_room``): this run's own
(``Ledger.reserved_in_flight``) and, under a workers' shared budget, its other live workers'
(``Ledger.reserved_elsewhere``), once per refused job. Both read every attempt of the run
through ``attempts_run``, and a shared budget is never reset: a worker whose budget had
300,000 attempts spent 54 s of its 59 in these two reads for the 600 jobs it had claimed past
its cap (its last 1,000 renders took 63 s, 6 s under a new budget's name). m020's partial
index holds the attempts in flight of unknown cost alone: as many as the calls in flight,
whatever the budget's past. Each test asks the engine for the plan of the statement sent."""

from __future__ import annotations

import re
import sqlite3

import pytest
from conftest import manifest, recorded_statements

from afc_cli.ledger import Ledger

BUDGET = "budget:nightly"
PAST = 3000  # the budget's ended attempts, earlier nights'


def _plan(url: str, sql: str, params: list) -> str:
    """SQLite: EXPLAIN QUERY PLAN; PostgreSQL: the generic plan a worker's connection keeps
    once psycopg prepares the statement (its statistics those of a ledger never analyzed)."""
    if not url.startswith("postgresql"):
        conn = sqlite3.connect(url)
        try:
            return " | ".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
        finally:
            conn.close()
    import psycopg

    numbers = iter(range(1, len(params) + 1))
    numbered = re.sub(r"\?", lambda _: f"${next(numbers)}", sql)
    values = ", ".join("'" + str(v).replace("'", "''") + "'" for v in params)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE probe ({', '.join(['text'] * len(params))}) AS {numbered}")
        return "\n".join(r[0] for r in conn.execute(f"EXPLAIN EXECUTE probe ({values})"))


@pytest.fixture
def spent_budget(afc, ledger_url):
    """A ledger whose shared budget has ``PAST`` ended attempts and, now, two calls in flight:
    this worker's (reserving 0.04) and a live sibling's (0.05)."""
    env = {"AFC_LEDGER": ledger_url}
    afc.write_manifest(manifest([{"key": f"k{i}", "prompt": f"p{i}"} for i in range(3)]))
    admitted = afc("submit", "manifest.yaml", "--no-run", env=env)
    assert admitted.returncode == 0, admitted.stderr
    ledger = Ledger(ledger_url)
    past, mine, sibling = (
        row[0] for row in ledger.db.execute("SELECT id FROM jobs ORDER BY key").fetchall()
    )
    insert = (
        "INSERT INTO attempts (job_id, number, chain_index, provider, model, status, owner,"
        " started_at, run_id, reserved_micros, cost_micros) VALUES (?, ?, 0, 'local', 'm1', ?,"
        " ?, 0, ?, ?, ?)"
    )
    with ledger.tx():
        for number in range(1, PAST + 1):
            ledger.db.execute(
                insert, (past, number, "succeeded", "earlier", BUDGET, 40_000, 40_000)
            )
        ledger.db.execute(insert, (mine, 1, "started", ledger.owner, BUDGET, 40_000, None))
        ledger.db.execute(insert, (sibling, 1, "started", "sibling", BUDGET, 50_000, None))
        lease = ledger.lease_clock() + 600
        ledger.db.execute(
            "UPDATE jobs SET lease_owner = 'sibling', lease_expires = ? WHERE id = ?",
            (lease, sibling),
        )
    yield ledger
    ledger.close()


def test_a_refused_jobs_look_at_the_calls_in_flight_reads_them_alone(
    spent_budget, ledger_url, monkeypatch
):
    ledger = spent_budget
    sent = recorded_statements(ledger, monkeypatch)
    assert ledger.reserved_in_flight(BUDGET, ledger.owner) == 40_000
    assert ledger.reserved_elsewhere(BUDGET, ledger.owner) == 50_000
    (own_sql, own_params), (others_sql, others_params) = sent
    for sql, params in ((own_sql, own_params), (others_sql, others_params)):
        plan = _plan(ledger_url, sql, params)
        # the budget's past (attempts_run: every attempt of the run) is not read
        assert "attempts_in_flight" in plan, plan
        assert "attempts_run" not in plan, plan
