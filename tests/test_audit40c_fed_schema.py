"""A worker's round, fed by claims while it runs (``worker.Refill``, every --poll since
5c55cf6), stops claiming once a newer afc has migrated the ledger: the worker checks the schema
before each claim between rounds (``Ledger.check_schema``: it stops, exit 2, 'with nothing in
flight'), but a claim made into a running round ran jobs on a schema it does not know, for as
long as the round was kept fed."""

from __future__ import annotations

import pytest
from conftest import manifest

from afc_cli.errors import LedgerError
from afc_cli.ledger import Ledger
from afc_cli.worker import work


def test_a_round_fed_after_a_newer_afc_migrated_the_ledger_claims_nothing_more(
    afc, ledger_url, monkeypatch, tmp_path
):
    from test_upgrade import _sql, newer_bookkeeping

    release = tmp_path / "release"
    monkeypatch.setenv("AFC_LOCAL_RELEASE", str(release))
    (tmp_path / "release.later").touch()  # 'later' renders at once, 'long' is held
    monkeypatch.setenv("AFC_SPOOL_DIR", str(tmp_path / "spool"))
    afc.env["AFC_LEDGER"] = ledger_url
    films = [{"key": "long", "prompt": "a video"}, {"key": "later", "prompt": "a still"}]
    afc.write_manifest(manifest(films))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    bookkeeping = newer_bookkeeping(ledger_url)
    claims: list[int] = []
    real = Ledger.claim_runnable

    def migrated_during_the_round(self, *args, **kwargs):
        claims.append(1)
        if len(claims) == 2:  # the round's first feed, 'long' under way: a newer afc migrates
            _sql(ledger_url, afc, bookkeeping)
            release.touch()  # and 'long' returns
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Ledger, "claim_runnable", migrated_during_the_round)
    with pytest.raises(LedgerError, match="was migrated by a newer afc"):
        work(ledger_path=ledger_url, concurrency=4, claim=1, poll_s=0.05, grace_s=5)
    assert len(claims) >= 2
    if ledger_url.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(ledger_url) as conn:
            rows = conn.execute("SELECT key, status, attempts FROM jobs ORDER BY key").fetchall()
    else:
        import sqlite3

        conn = sqlite3.connect(afc.cwd / ledger_url)
        rows = conn.execute("SELECT key, status, attempts FROM jobs ORDER BY key").fetchall()
        conn.close()
    # 'long' ended in its round; 'later', claimed into it after the migration, was not run
    assert rows == [("later", "queued", 0), ("long", "succeeded", 1)], rows
