"""Outside audit 58c: what a command pays per row on a catalogue's ledger (120,000 jobs,
358,000 attempts, 120 batches). Each test asks the engine for the plan of a statement afc
sends, as tests/test_audit52b_ledger_scale.py does, and checks that it reads an index, not
every row of a table that grows with every batch."""

from __future__ import annotations

from conftest import jobs, manifest
from test_audit52b_ledger_scale import _plans, _scans, _sent

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest


def test_a_resubmit_reads_its_batch_s_avoided_renders_from_an_index(ledger_url, afc, monkeypatch):
    """A re-submit of a finished batch reads, at each admission round, the batch's rows of
    ``avoided`` (the jobs already counted, the renders found stored): the table had no index
    on its batch, and each of the two statements read every row of every batch (27-44 ms at
    384,000 rows on SQLite, a 5,000-job round sending both)."""
    ledger = Ledger(ledger_url)
    try:
        m = load_manifest(afc.write_manifest(manifest(jobs(4))))
        ledger.admit(m, "file:///tmp/x", RateCards())
        with ledger.tx():
            ledger.db.execute("UPDATE jobs SET status = 'succeeded', step = 'done'")
        with _sent(ledger, monkeypatch) as sent:
            ledger.admit(m, "file:///tmp/x", RateCards())
        counted = ledger.db.execute("SELECT COUNT(*) FROM avoided WHERE reason = 'replay'")
        assert counted.fetchone()[0] == 4  # the replays were counted, once each
        reads = _plans(ledger, sent, lambda sql: "FROM avoided" in sql and "batch = ?" in sql)
        assert len(reads) == 2, sent
        for sql, plan in reads:
            assert "avoided_batch" in plan, (sql, plan)
            assert not _scans(plan, "avoided"), (sql, plan)
    finally:
        ledger.close()
