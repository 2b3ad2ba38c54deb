"""``afc ledger copy`` into PostgreSQL of a ledger whose run has many attempts. m019's insert
trigger added each copied attempt to its run's ``run_spend`` row, all in the copy's one
transaction, where every update of a row leaves a version the next update walks past: a run's
n attempts cost n²/2 of them. A workers' budget is never reset: a SQLite ledger whose budget
had 300,000 attempts took 10 min 52 s to copy, 15 s before m019. The copy's attempts now go in
without that trigger and their sums are written once (``PostgresLedger.before_copy``,
``after_copy``). The test counts the writes of ``run_spend`` the copy makes, through a trigger
of its own on the destination: one per run, not one per attempt. A role given table grants
only, which may not switch the trigger off (ALTER TABLE is the owner's), copied through it
until m021 made the trigger's WHEN read ``afc.copying``, which the copy sets for its own
transaction."""

from __future__ import annotations

import uuid

import pytest
from conftest import manifest

from afc_cli.ledger import Ledger

psycopg = pytest.importorskip("psycopg")

ATTEMPTS = 300


@pytest.fixture
def granted(pg_server, pg_url):
    """The ledger's URL as a login role given only afc's tables (a host's worker role)."""
    name = f"afc_copier_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server.admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {name} LOGIN")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {name}"
        )
    as_role = pg_url.replace("://afc@", f"://{name}@", 1)
    assert as_role != pg_url
    yield as_role
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"DROP OWNED BY {name}")
    with psycopg.connect(pg_server.admin_url, autocommit=True) as conn:
        conn.execute(f"DROP ROLE {name}")


def grant_sequences(url: str) -> None:
    """What a copy as a role other than the tables' owner needs beyond the tables."""
    role = url.split("://", 1)[1].split("@", 1)[0]
    with psycopg.connect(url.replace(f"://{role}@", "://afc@", 1), autocommit=True) as conn:
        conn.execute(f"GRANT USAGE, UPDATE ON ALL SEQUENCES IN SCHEMA public TO {role}")


def test_a_role_that_may_not_move_the_ids_on_is_told_the_grant_it_needs(afc, granted):
    """A copy writes each row with its id, then sets where each table's ids continue
    (``setval``: UPDATE on the sequence). A role given the tables alone was told to grant
    it the tables (``GRANT ... ON ALL TABLES``), which it had."""
    afc.write_manifest(manifest([{"key": "k1", "prompt": "p1"}]))
    assert afc("submit", "manifest.yaml", env={"AFC_LEDGER": "src.db"}).returncode == 0
    refused = afc("ledger", "copy", "src.db", granted)
    assert refused.returncode == 1, refused.stderr
    assert "permission denied for sequence" in refused.stderr
    assert "GRANT USAGE, UPDATE ON ALL SEQUENCES IN SCHEMA" in refused.stderr
    assert "ON ALL TABLES" not in refused.stderr and "Nothing was copied" in refused.stderr
    grant_sequences(granted)
    copied = afc("ledger", "copy", "src.db", granted)
    assert copied.returncode == 0, copied.stderr


@pytest.mark.parametrize("copier", ["owner", "granted"])
def test_a_copy_sums_each_runs_attempts_once_not_once_an_attempt(afc, pg_url, copier, request):
    destination = pg_url
    if copier == "granted":
        destination = request.getfixturevalue("granted")
        grant_sequences(destination)
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
        conn.execute("GRANT INSERT ON spend_writes TO PUBLIC")  # the copier's writes count
    copy = afc("ledger", "copy", "src.db", destination)
    assert copy.returncode == 0, copy.stderr
    with psycopg.connect(pg_url) as conn:
        writes = conn.execute("SELECT COUNT(*) FROM spend_writes").fetchone()[0]
        kept = dict(conn.execute("SELECT run_id, spend_micros FROM run_spend").fetchall())
        enabled = conn.execute(
            "SELECT tgenabled FROM pg_trigger WHERE tgname = 'attempts_spend_insert'"
        ).fetchone()[0]
    assert kept == sums
    assert writes == len(sums)  # was one per copied attempt (302), a granted role's until m021
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
