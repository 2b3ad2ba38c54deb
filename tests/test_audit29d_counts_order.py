"""Outside audit 29d: ``afc status --json``'s ``counts`` in one order on both engines.

The counts come from a GROUP BY (batch, status) with no ORDER BY: SQLite gives the groups in
its index's order, PostgreSQL in its hash table's, so one ledger copied between the engines
gave its counts in two orders (a script comparing the two outputs, or a monitoring diff of
yesterday's, saw a change where there was none). Both now order them by batch and status
(code points), as SQLite gave them."""

from __future__ import annotations

from conftest import jobs, manifest


def test_counts_come_in_status_order_on_both_engines(afc, ledger_url):
    listed = jobs(3) + [
        {"key": f"bad-{i}", "prompt": "no", "params": {"fail": ["invalid"]}} for i in range(2)
    ]
    afc.write_manifest(manifest(listed, batch="b2"))
    assert afc("submit", "manifest.yaml", "-q", "--ledger", ledger_url).returncode == 1
    afc.write_manifest(manifest(jobs(2, fail=["invalid"]), batch="b1"))
    assert afc("submit", "manifest.yaml", "-q", "--ledger", ledger_url).returncode == 1
    status = afc.json("status", "--ledger", ledger_url)
    assert list(status["counts"].items()) == [("failed", 4), ("succeeded", 3)]
