"""A run's budget reads its spend from ``run_spend``, a sum the ledger's triggers keep
(afc_cli/migrations.py, m019): every change to an attempt's run id, known cost or reservation,
whichever statement makes it, moves the sum in the same transaction. Before, the check ahead of
each paid call summed every attempt of the run: 10,000 jobs under ``--max-spend`` took twice
as long as without it, growing with the square of the batch.

The sum must equal what it replaced (``SUM(COALESCE(cost_micros, reserved_micros, 0))`` by
run id) after any sequence of writes, on SQLite and PostgreSQL, after a real run under a
budget, after a ledger copy, and on a ledger made before the table was."""

from __future__ import annotations

import random
import sqlite3

from conftest import manifest

from afc_cli.ledger import Ledger

SUMS = (
    "SELECT run_id, SUM(COALESCE(cost_micros, reserved_micros, 0)) FROM attempts"
    " WHERE run_id IS NOT NULL GROUP BY run_id"
)


def kept(ledger: Ledger) -> dict[str, int]:
    """The triggers' sums, without the runs whose sum is 0 (a run whose attempts all moved
    to another run id keeps a row of 0)."""
    rows = ledger.db.execute("SELECT run_id, spend_micros FROM run_spend").fetchall()
    return {run: int(spend) for run, spend in rows if spend}


def summed(ledger: Ledger) -> dict[str, int]:
    return {run: int(spend) for run, spend in ledger.db.execute(SUMS).fetchall() if spend}


def test_the_sum_follows_every_write_to_the_attempts(afc, ledger_url):
    """Random inserts, upserts (a report's ``ON CONFLICT DO UPDATE``), updates of the cost,
    the reservation and the run id (a reopening moves an attempt to the run polling it), and
    deletes: after each, the kept sum is the attempts' sum, and ``run_spend`` reads it."""
    env = {"AFC_LEDGER": ledger_url}
    afc.write_manifest(manifest([{"key": f"k{i}", "prompt": f"p{i}"} for i in range(6)]))
    admitted = afc("submit", "manifest.yaml", "--no-run", env=env)
    assert admitted.returncode == 0, admitted.stderr
    ledger = Ledger(ledger_url)
    try:
        job_ids = [row[0] for row in ledger.db.execute("SELECT id FROM jobs").fetchall()]
        rng = random.Random(19)
        runs = ["run-a", "run-b", "budget:nightly", None]
        money = [None, 0, 1, 50_000, 125_000, 2_000_000]
        numbers: dict[str, int] = {job: 0 for job in job_ids}
        for _ in range(300):
            op = rng.choice(["insert", "insert", "upsert", "cost", "reserve", "move", "delete"])
            job = rng.choice(job_ids)
            with ledger.tx():
                if op == "insert" or (op != "insert" and not numbers[job]):
                    numbers[job] += 1
                    ledger.db.execute(
                        "INSERT INTO attempts (job_id, number, chain_index, provider, model,"
                        " status, started_at, run_id, reserved_micros, cost_micros)"
                        " VALUES (?, ?, 0, 'local', 'm1', 'started', 0, ?, ?, ?)",
                        (job, numbers[job], rng.choice(runs), rng.choice(money), None),
                    )
                    continue
                number = rng.randint(1, numbers[job])
                where = (job, number)
                if op == "upsert":
                    ledger.db.execute(
                        "INSERT INTO attempts (job_id, number, chain_index, provider, model,"
                        " status, started_at, cost_micros) VALUES (?, ?, 0, 'local', 'm1',"
                        " 'succeeded', 0, ?) ON CONFLICT (job_id, provider, number) DO UPDATE"
                        " SET cost_micros = excluded.cost_micros, status = excluded.status",
                        (job, number, rng.choice(money)),
                    )
                elif op == "cost":
                    ledger.db.execute(
                        "UPDATE attempts SET cost_micros = ? WHERE job_id = ? AND number = ?",
                        (rng.choice(money), *where),
                    )
                elif op == "reserve":
                    ledger.db.execute(
                        "UPDATE attempts SET reserved_micros = ? WHERE job_id = ? AND number = ?",
                        (rng.choice(money), *where),
                    )
                elif op == "move":
                    ledger.db.execute(
                        "UPDATE attempts SET run_id = ? WHERE job_id = ? AND number = ?",
                        (rng.choice(runs), *where),
                    )
                else:
                    ledger.db.execute("DELETE FROM attempts WHERE job_id = ? AND number = ?", where)
            assert kept(ledger) == summed(ledger), op
        sums = summed(ledger)
        assert len(sums) == 3 and all(sums.values())  # every run id met, none summed to 0
        for run in runs:
            assert ledger.run_spend(run) == sums.get(run, 0)
        assert ledger.run_spend("never-ran") == 0
    finally:
        ledger.close()


def test_a_run_under_a_budget_and_a_copy_of_its_ledger_keep_the_sum(afc, ledger_url):
    """A real run stopped by its budget (its attempts' reservations settled to known costs),
    then its ledger copied: the destination's triggers sum the copied attempts."""
    env = {"AFC_LEDGER": ledger_url}
    afc.write_manifest(manifest([{"key": f"k{i}", "prompt": f"p{i}"} for i in range(8)]))
    run = afc("submit", "manifest.yaml", "--max-spend", "0.2", env=env)
    assert run.returncode == 4, run.stderr  # 0.05 a job: 4 of the 8 fit
    ledger = Ledger(ledger_url)
    try:
        sums = summed(ledger)
        assert list(sums.values()) == [200_000]
        assert kept(ledger) == sums
    finally:
        ledger.close()
    copy = afc("ledger", "copy", ledger_url, "copy.db", env=env)
    assert copy.returncode == 0, copy.stderr
    copied = Ledger(afc.cwd / "copy.db")
    try:
        assert kept(copied) == sums
    finally:
        copied.close()


def test_a_ledger_made_before_the_sums_gets_them_when_migrated(tmp_path):
    """m019 sums the attempts already there, and its triggers keep the sum from then on."""
    from sqlite_utils import Database

    from afc_cli.migrations import migrations

    path = tmp_path / "old.db"
    db = Database(path)
    migrations.apply(db, stop_before="m019_run_spend")
    db.execute(
        "INSERT INTO batches (name, storage, rates_json, created_at, updated_at)"
        " VALUES ('b', 'file:///x', '[]', 0, 0)"
    )
    columns = {c.name for c in db["jobs"].columns if c.notnull and c.default_value is None}
    values = {c: 0 for c in columns} | {"id": "j1", "batch": "b", "key": "k", "status": "queued"}
    db["jobs"].insert(values)
    for number, run, reserved, cost in [
        (1, "r1", 50_000, 40_000),
        (2, "r1", 50_000, None),
        (3, "r2", None, 70_000),
        (4, None, 90_000, 90_000),
    ]:
        db.execute(
            "INSERT INTO attempts (job_id, number, chain_index, provider, model, status,"
            " started_at, run_id, reserved_micros, cost_micros)"
            " VALUES ('j1', ?, 0, 'local', 'm1', 'failed', 0, ?, ?, ?)",
            (number, run, reserved, cost),
        )
    db.conn.commit()
    db.close()
    ledger = Ledger(path)
    try:
        assert kept(ledger) == {"r1": 90_000, "r2": 70_000}
        assert ledger.run_spend("r1") == 90_000
        with ledger.tx():
            ledger.db.execute("UPDATE attempts SET cost_micros = 45000 WHERE number = 2")
        assert ledger.run_spend("r1") == 85_000
    finally:
        ledger.close()
    assert sqlite3.connect(path).execute("SELECT COUNT(*) FROM run_spend").fetchone()[0] == 2
