"""'afc ledger copy' of a ledger onto itself, named two ways, is refused at once with nothing
written. Compared as text alone, a file's copy onto itself (``afc.db`` and ``./afc.db``)
waited for its own write lock and failed after the busy timeout saying another process held
it; a database named by two URLs with no batch yet was marked moved to itself, shut to
every run (found by outside audit 42b)."""

from __future__ import annotations

import sqlite3

from conftest import manifest

from afc_cli.ledger import Ledger


def test_a_file_named_two_ways_is_refused_at_once(afc):
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    refused = afc("ledger", "copy", "afc.db", "./afc.db")
    assert refused.returncode == 2, refused.stderr
    assert "one ledger named two ways" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    with sqlite3.connect(afc.cwd / "afc.db") as db:
        assert db.execute("SELECT COUNT(*) FROM ledger_moves").fetchone()[0] == 0
    assert afc("resume").returncode == 0  # still runs its jobs
    # a ledger with no batch yet: it waited for its own write lock before
    Ledger(str(afc.cwd / "empty.db")).close()
    refused = afc("ledger", "copy", "empty.db", str(afc.cwd / "empty.db"))
    assert refused.returncode == 2 and "one ledger named two ways" in refused.stderr, refused


def test_a_database_named_two_ways_is_refused_and_still_runs(afc, pg_url):
    other = pg_url + ("&" if "?" in pg_url else "?") + "application_name=afc-copy"
    refused = afc("ledger", "copy", pg_url, other)
    assert refused.returncode == 2, refused.stderr
    assert "one ledger named two ways" in refused.stderr, refused.stderr
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    ran = afc("submit", "manifest.yaml", "--ledger", pg_url)
    assert ran.returncode == 0, ran.stderr  # not moved, not shut to runs
