"""A blank ledger and an older-schema ledger reach the same schema when opened."""

from __future__ import annotations

import sqlite3

from sqlite_utils import Database

from afc_cli.ledger import Ledger
from afc_cli.migrations import migrations


def schema(path) -> dict[str, list[tuple]]:
    conn = sqlite3.connect(path)
    try:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
                " AND name != '_sqlite_migrations' ORDER BY name"
            )
        ]
        out = {t: conn.execute(f"PRAGMA table_info({t})").fetchall() for t in tables}
        out["_indexes"] = conn.execute(
            "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'index' ORDER BY name"
        ).fetchall()
        return out
    finally:
        conn.close()


def test_blank_and_old_ledgers_migrate_to_the_same_schema(tmp_path):
    blank = tmp_path / "blank.db"
    Ledger(blank).close()

    old = tmp_path / "old.db"
    db = Database(old)
    migrations.apply(db, stop_before="m003_budget_and_avoided")
    db.execute(
        "INSERT INTO batches (name, storage, rates_json, created_at, updated_at)"
        " VALUES ('b', 'file:///x', '[]', 0, 0)"
    )
    db.close()
    assert "avoided" not in schema(old)

    Ledger(old).close()
    assert schema(old) == schema(blank)
    applied = sqlite3.connect(old).execute("SELECT name FROM _sqlite_migrations").fetchall()
    assert [r[0] for r in applied] == [
        "m001_initial",
        "m002_status_index",
        "m003_budget_and_avoided",
        "m004_batch_limits",
        "m005_webhook_outbox",
        "m006_retry_and_interrupts",
        "m007_review_needs_inputs",
        "m008_status_age_index",
        "m009_lease_mono",
        "m010_ledger_moves",
        "m011_output_key_holders",
        "m012_batch_storage_endpoint",
        "m013_output_key_rendering",
        "m014_output_key_spooled",
        "m015_attempt_answer_url",
        "m016_output_key_poll_left",
        "m017_claim_order",
        "m018_leased_and_blocked",
        "m019_run_spend",
        "m020_attempts_in_flight",
        "m021_copy_without_spend_trigger",
        "m022_attempts_started",
        "m023_attempts_per_minute",
        "m024_jobs_lease_owner",
        "m025_avoided_job",
        "m026_deliveries_job",
        "m027_avoided_batch",
        "m028_batch_storage_mark",
    ]
    # data written under the old schema survives
    assert sqlite3.connect(old).execute("SELECT name FROM batches").fetchall() == [("b",)]


def test_opening_twice_applies_nothing_new(tmp_path):
    path = tmp_path / "l.db"
    Ledger(path).close()
    before = schema(path)
    Ledger(path).close()
    assert schema(path) == before


def test_ledger_runs_in_wal_mode(tmp_path):
    ledger = Ledger(tmp_path / "l.db")
    try:
        assert ledger.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        ledger.close()
