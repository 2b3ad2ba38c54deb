"""A submit refused before anything is written leaves a PostgreSQL database afc has not used
yet as it found it: a missing API key or price (under --max-spend) was refused only after the
ledger was opened, and opening it had applied afc's schema. A new SQLite ledger is not even
made (``run.submit``: a refused run writes nothing)."""

from __future__ import annotations

import psycopg
from conftest import jobs, manifest


def _tables(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            )
        ]


def test_a_refused_submit_leaves_an_empty_database_empty(afc, pg_server):
    url = pg_server.database(migrated=False)
    data = manifest(jobs(1))
    data["defaults"]["chain"] = [{"provider": "openai", "model": "gpt-image-1"}]
    afc.write_manifest(data)
    env = {"AFC_LEDGER": url, "OPENAI_API_KEY": ""}
    refused = afc("submit", "manifest.yaml", env=env)
    assert refused.returncode == 2, refused.stderr
    assert "OPENAI_API_KEY" in refused.stderr
    assert _tables(url) == []
    # the price a budget needs, missing: refused alike
    unpriced = afc(
        "submit", "manifest.yaml", "--max-spend", "1", env={**env, "OPENAI_API_KEY": "k"}
    )
    assert unpriced.returncode == 2, unpriced.stderr
    assert _tables(url) == []
    # the key given, the ledger is made and the job admitted
    assert afc("submit", "manifest.yaml", "--no-run", env=env).returncode == 0
    assert "jobs" in _tables(url)
