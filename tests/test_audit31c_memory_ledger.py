"""Outside audit 31c: SQLite's in-memory database is no ledger. '--ledger :memory:' (or
sqlite:///:memory:, or a file named ./:memory:, which sqlite3 reads the same) ran a batch,
paid for its renders and recorded each attempt into memory that was gone when afc exited:
'afc status' then said there was no ledger, and no record of what was paid remained."""

from __future__ import annotations

import pytest
from conftest import manifest


@pytest.mark.parametrize("ledger", [":memory:", "sqlite:///:memory:", "./:memory:"])
def test_an_in_memory_ledger_is_refused_before_anything_is_paid(afc, ledger):
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}, {"key": "b", "prompt": "q"}]))
    calls = afc.cwd / "calls.log"
    env = {"AFC_LOCAL_CALL_LOG": str(calls)}
    for args, environ in (
        (["--ledger", ledger], env),
        ([], {**env, "AFC_LEDGER": ledger}),
    ):
        result = afc("submit", "manifest.yaml", *args, env=environ)
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
        assert "in-memory database" in result.stderr and "name a file" in result.stderr, (
            result.stderr
        )
        assert not calls.exists() or calls.read_text() == ""
        assert not afc.outputs().exists()
    assert afc("status", "--ledger", ledger).returncode == 2


def test_a_sqlite_url_with_a_query_is_refused_not_a_new_ledger_named_after_it(afc):
    """'sqlite:///afc.db?timeout=30' (SQLAlchemy's options written as a URL query) opened a
    new, empty ledger in a file named 'afc.db?timeout=30' beside the real one: the jobs the
    real ledger had cancelled were rendered and paid for again, its history out of sight."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    assert afc("submit", "manifest.yaml").returncode == 0
    result = afc("submit", "manifest.yaml", "--ledger", "sqlite:///afc.db?timeout=30")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "no query" in result.stderr and "sqlite:///afc.db" in result.stderr, result.stderr
    assert not [p.name for p in afc.cwd.iterdir() if "?" in p.name], list(afc.cwd.iterdir())
