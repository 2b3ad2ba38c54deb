"""Outside audit 51f: a worker's round whose run found the ledger migrated as it started.

A worker looks at the ledger's migrations after a claim that took jobs and gives them back
unrun once a newer afc migrated it (``worker.work``'s ``claim_now``). Its round's run looks
again before its first call (``run.run_jobs``: ``check_schema(wait=True)``, which waits for a
migration under way): a migration that began after the worker's look (during the storage's
check, or the round's reads before the run) stopped the worker there, exit 2, nothing called,
but the round's jobs stayed leased to the stopped worker: another host's worker waited out
the lease (AFC_LEASE_S, 300 s by default) before it could run them.
"""

from __future__ import annotations

import pytest
from conftest import jobs, manifest

from afc_cli import worker
from afc_cli.errors import LedgerError
from afc_cli.worker import work


def test_a_round_stopped_by_a_migration_as_its_run_starts_gives_its_jobs_back(
    afc, ledger_url, monkeypatch, tmp_path
):
    from test_upgrade import _rows, _sql, newer_bookkeeping

    calls = tmp_path / "calls.log"
    monkeypatch.setenv("AFC_LOCAL_CALL_LOG", str(calls))
    monkeypatch.setenv("AFC_SPOOL_DIR", str(tmp_path / "spool"))
    afc.env["AFC_LEDGER"] = ledger_url
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    real = worker.batch_settings
    rounds: list[int] = []

    def migrated_as_the_round_starts(ledger):
        # the round's jobs claimed, the worker's look at the migrations passed: a newer afc
        # commits its migration before the round's run looks again
        rounds.append(1)
        if len(rounds) == 1:
            _sql(ledger_url, afc, newer_bookkeeping(ledger_url))
        return real(ledger)

    monkeypatch.setattr(worker, "batch_settings", migrated_as_the_round_starts)
    with pytest.raises(LedgerError, match="was migrated by a newer afc"):
        work(ledger_path=ledger_url, concurrency=4, claim=2, poll_s=0.05, grace_s=5)
    assert rounds == [1]
    assert not calls.exists()  # nothing called
    rows = _rows(
        ledger_url, afc, "SELECT key, status, attempts, lease_owner FROM jobs ORDER BY key"
    )
    # given back, for any worker of a newer afc to take at once
    assert [tuple(row) for row in rows] == [
        ("shot-001", "queued", 0, None),
        ("shot-002", "queued", 0, None),
    ], rows
