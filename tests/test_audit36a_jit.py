"""A PostgreSQL ledger's session plans without JIT compilation (``jit = off``).

The server JIT-compiles a statement whose estimated cost passes ``jit_above_cost`` (100,000),
with inlining and optimization past 500,000. afc's statements that list a batch's jobs with
their costs (a run's summary, ``afc status``: ``Ledger._STATUS_SQL``, five look-ups in
``attempts`` per job) pass them as soon as ``attempts`` was never analyzed (its statistics
those of an empty table: 345 attempts a job estimated), and on a batch of a few thousand jobs
even when it was. On a ledger of 100,000 jobs in 20 batches, the summary of a run of one
new 100-job batch took 754 ms of server time before ``ANALYZE`` (850 ms of JIT compilation,
spread over the parallel workers; 25 ms without it), and ``afc status`` of a 5,000-job batch
after ``ANALYZE`` 205 ms (77 ms without). None of afc's statements gains from it: the
aggregates of ``afc costs report`` measured the same with and without.
"""

from __future__ import annotations

import pytest
from conftest import jobs, manifest, recorded_statements

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest

psycopg = pytest.importorskip("psycopg")


def test_a_postgres_ledger_session_never_jit_compiles_a_status_listing(pg_url, afc, monkeypatch):
    ledger = Ledger(pg_url)
    try:
        ledger.admit(
            load_manifest(afc.write_manifest(manifest(jobs(200)))), "file:///x", RateCards()
        )
        assert ledger.db.execute("SHOW jit").fetchone()[0] == "off"
        sent = recorded_statements(ledger, monkeypatch)
        assert len(ledger.status_rows("b1")) == 200
        sql, params = next((q, p) for q, p in sent if "AS unpriced_attempts" in q)
        monkeypatch.undo()
        # whatever the estimate (here any cost at all would pass the threshold), the plan
        # the ledger's session makes has no JIT section
        ledger.db.execute("SET jit_above_cost = 0")
        plan = "\n".join(row[0] for row in ledger.db.execute("EXPLAIN " + sql, params).fetchall())
        assert "JIT" not in plan, plan
    finally:
        ledger.close()
