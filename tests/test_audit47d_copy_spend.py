"""``afc ledger copy`` into PostgreSQL of a ledger whose run has many attempts. m019's insert
trigger added each copied attempt to its run's ``run_spend`` row, all in the copy's one
transaction, where every update of a row leaves a version the next update walks past: a run's
n attempts cost n²/2 of them. A workers' budget is never reset: a SQLite ledger whose budget
had 300,000 attempts took 10 min 52 s to copy, 15 s before m019. The copy's attempts now go in
without that trigger and their sums are written once (``PostgresLedger.before_copy``,
``after_copy``). The test counts the writes of ``run_spend`` the copy makes, through a trigger
of its own on the destination: one per run, not one per attempt."""

from __future__ import annotations

import pytest
from conftest import manifest

from afc_cli.ledger import Ledger

psycopg = pytest.importorskip("psycopg")

ATTEMPTS = 300


def test_a_copy_sums_each_runs_attempts_once_not_once_an_attempt(afc, pg_url):
    afc.write_manifest(manifest([{"key": f"k{i}", "prompt": f"p{i}"} for i in range(4)]))
    run = afc("submit", "manifest.yaml", "--max-spend", "0.1", env={"AFC_LEDGER": "src.db"})
    assert run.returncode == 4, run.stderr  # 0.05 a job: 2 of the 4 fit
    source = Ledger(afc.cwd / "src.db")
    try:
        (job,) = source.db.execute("SELECT id FROM jobs WHERE attempts = 0 LIMIT 1").fetchone()
        with source.tx():
            for number in range(1, ATTEMPTS + 1):  # an earlier night's, of a shared budget
                source.db.execute(
                    "INSERT INTO attempts (job_id, number, chain_index, provider, model,"
                    " status, owner, started_at, run_id, reserved_micros, cost_micros)"
                    " VALUES (?, ?, 0, 'local', 'm1', 'succeeded', 'x', 0, 'budget:nightly',"
                    " 50000, ?)",
                    (job, number, None if number % 7 == 0 else 40_000),
                )
        sums = dict(
            source.db.execute(
                "SELECT run_id, SUM(COALESCE(cost_micros, reserved_micros, 0)) FROM attempts"
                " WHERE run_id IS NOT NULL GROUP BY run_id"
            ).fetchall()
        )
    finally:
        source.close()
    assert len(sums) == 2 and sums["budget:nightly"] == 300 * 40_000 + 42 * 10_000
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE spend_writes (op TEXT)")
        conn.execute(
            "CREATE FUNCTION spend_written() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN INSERT INTO spend_writes VALUES (TG_OP); RETURN NULL; END $$"
        )
        conn.execute(
            "CREATE TRIGGER spend_writes AFTER INSERT OR UPDATE ON run_spend"
            " FOR EACH ROW EXECUTE FUNCTION spend_written()"
        )
    copy = afc("ledger", "copy", "src.db", pg_url)
    assert copy.returncode == 0, copy.stderr
    with psycopg.connect(pg_url) as conn:
        writes = conn.execute("SELECT COUNT(*) FROM spend_writes").fetchone()[0]
        kept = dict(conn.execute("SELECT run_id, spend_micros FROM run_spend").fetchall())
        enabled = conn.execute(
            "SELECT tgenabled FROM pg_trigger WHERE tgname = 'attempts_spend_insert'"
        ).fetchone()[0]
    assert kept == sums
    assert writes == len(sums)  # was one per copied attempt (302)
    assert enabled == "O"  # the copy's later writes, and every run's, move the sums again
    ledger = Ledger(pg_url)
    try:
        with ledger.tx():
            ledger.db.execute(
                "INSERT INTO attempts (job_id, number, chain_index, provider, model, status,"
                " started_at, run_id, reserved_micros) VALUES (?, ?, 0, 'local', 'm1',"
                " 'started', 0, 'budget:nightly', 50000)",
                (job, ATTEMPTS + 1),
            )
        assert ledger.run_spend("budget:nightly") == sums["budget:nightly"] + 50_000
    finally:
        ledger.close()
