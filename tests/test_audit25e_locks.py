"""Outside audit 25e: a PostgreSQL ledger shared by several machines, under a lock another
session holds on it (a psql session left in a transaction) through the real ``afc``."""

from __future__ import annotations

import subprocess

import psycopg
import pytest
from conftest import jobs, manifest
from test_postgres_e2e import PgAfc


@pytest.fixture
def pg(tmp_path, pg_url) -> PgAfc:
    return PgAfc(tmp_path, pg_url)


# the server's own lock_timeout, short so the test does not wait afc's 30 s
SHORT_LOCK_WAIT = {"PGOPTIONS": "-c lock_timeout=1000"}


@pytest.mark.parametrize(
    "command",
    [["cancel", "shot-001"], ["retry", "shot-001"], ["review", "approve", "shot-001"]],
    ids=["cancel", "retry", "approve"],
)
def test_a_job_row_a_psql_session_holds_is_a_bounded_wait_and_says_which_session(pg, command):
    """An operator fixes a job by hand in psql (``BEGIN; UPDATE jobs ...``) and leaves the
    transaction open. 'afc cancel', 'afc retry' or 'afc review approve' of that job then
    waited for the row for ever, saying nothing (a cron line stuck for the night), where a
    SQLite ledger's busy timeout ends the wait with a message. Each now waits a bounded time
    (``lock_timeout``) and exits 1 with one line naming the lock and where to find the session
    (pg_stat_activity); once the session ends, the same command works."""
    review = command[0] == "review"
    job = {**jobs(1)[0], "review": True} if review else jobs(1)[0]
    pg.write_manifest(manifest([job]))
    admit = ["submit", "manifest.yaml"] + ([] if review else ["--no-run"])
    assert pg(*admit).returncode == 0
    if command[0] == "retry":
        assert pg("cancel", "shot-001").returncode == 0
    before = pg.rows("SELECT status FROM jobs")
    holder = psycopg.connect(pg.url)
    try:
        holder.execute("UPDATE jobs SET updated_at = updated_at WHERE key = 'shot-001'")
        try:
            held = pg(*command, env=SHORT_LOCK_WAIT, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"afc {' '.join(command)} waited for ever on a row lock")
        assert held.returncode == 1, held.stderr
        assert "Traceback" not in held.stderr
        assert "lock timeout" in held.stderr, held.stderr
        assert "pg_stat_activity" in held.stderr, held.stderr
        assert "check the database server" not in held.stderr, held.stderr
    finally:
        holder.rollback()
        holder.close()
    assert pg.rows("SELECT status FROM jobs") == before, "a refused change wrote something"
    done = pg(*command, env=SHORT_LOCK_WAIT)
    assert done.returncode == 0, done.stderr
    expected = {"cancel": "cancelled", "retry": "queued", "review": "succeeded"}[command[0]]
    assert pg.rows("SELECT status FROM jobs") == [(expected,)]


def test_a_ledger_session_bounds_its_lock_waits_unless_the_server_sets_it(pg_url, monkeypatch):
    """afc's own bound when nothing else sets one (PostgreSQL's default, 0, waits for ever);
    a lock_timeout the operator set (here in PGOPTIONS) is kept."""
    from afc_cli.ledger import Ledger

    ledger = Ledger(pg_url)
    try:
        assert ledger.db.execute("SHOW lock_timeout").fetchone()[0] == "30s"
    finally:
        ledger.close()
    monkeypatch.setenv("PGOPTIONS", "-c lock_timeout=120s")
    ledger = Ledger(pg_url)
    try:
        assert ledger.db.execute("SHOW lock_timeout").fetchone()[0] == "2min"
    finally:
        ledger.close()


@pytest.mark.parametrize("command", [["status"], ["queue", "stats"]], ids=["status", "stats"])
def test_a_read_held_behind_a_lock_says_to_run_it_again_not_afc_resume(pg, command):
    """A reading command whose statement met a lost connection or a lock held past its wait
    (a psql session's LOCK TABLE jobs) said a run's words: 'The run stopped; every job stays
    resumable ... then run afc resume', which from a monitoring cron line ('afc queue stats
    --fail-if ...') would start paying for the batch on that host. It says the command
    changed nothing and to run it again."""
    pg.write_manifest(manifest(jobs(1)))
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    holder = psycopg.connect(pg.url)
    try:
        holder.execute("LOCK TABLE jobs")
        held = pg(*command, env=SHORT_LOCK_WAIT, timeout=60)
    finally:
        holder.rollback()
        holder.close()
    assert held.returncode == 1, held.stderr
    assert "Traceback" not in held.stderr
    assert "afc resume" not in held.stderr and "The run stopped" not in held.stderr, held.stderr
    assert "changed nothing" in held.stderr and "pg_stat_activity" in held.stderr, held.stderr
    assert f"run it again: afc {' '.join(command)}" in held.stderr, held.stderr


def test_a_statement_the_servers_statement_timeout_cancelled_names_it(pg):
    """A database server shared with other applications often sets statement_timeout for
    every role. A statement of afc it cancelled (here a cancel waiting for a row a psql
    session holds, past the server's 0.5 s) ended 'check the database server and the
    connection to it', where both were fine: it names the setting and how to lift it."""
    pg.write_manifest(manifest(jobs(1)))
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    holder = psycopg.connect(pg.url)
    try:
        holder.execute("SELECT * FROM jobs FOR UPDATE")
        held = pg("cancel", "shot-001", env={"PGOPTIONS": "-c statement_timeout=500"}, timeout=60)
    finally:
        holder.rollback()
        holder.close()
    assert held.returncode == 1, held.stderr
    assert "Traceback" not in held.stderr
    assert "statement timeout" in held.stderr, held.stderr
    assert "check the database server" not in held.stderr, held.stderr
    assert "SET statement_timeout" in held.stderr, held.stderr
    assert pg.rows("SELECT status FROM jobs") == [("queued",)]
