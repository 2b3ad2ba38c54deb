"""Outside audit 26e: upgrading afc over a PostgreSQL ledger another session holds a lock on.

The ledger is the current schema taken back by its last migration, as tests/test_upgrade.py
builds it (what the afc before that migration left). A psql session left in a transaction
that wrote a job (an operator's fix by hand) holds a lock the migration needs
(``LOCK TABLE jobs IN EXCLUSIVE MODE``; an ``ALTER TABLE`` waits the same way on a session
that only read the table). Before, the upgraded afc's first command waited for it for ever,
saying nothing, and every other session's use of the table queued behind its waiting lock;
now it waits as long as afc's other statements do (``postgres.LOCK_WAIT_S``, or the
lock_timeout the server, the role or PGOPTIONS set) and exits 2 naming the migrations and
where to find the session, with nothing migrated. A statement_timeout that cancels the
migration is said as such, not as 'cannot connect to the ledger'.
"""

from __future__ import annotations

import subprocess
import sys

import psycopg
import pytest
from conftest import jobs, manifest
from test_upgrade import LAST, _applied, _before_last_migration

# the server's own lock_timeout, short so the end-to-end test does not wait afc's 30 s
SHORT_LOCK_WAIT = {"PGOPTIONS": "-c lock_timeout=1000"}

# 'afc status' with afc's own bound (no lock_timeout set anywhere) shortened to half a second
STATUS_WITH_SHORT_BOUND = (
    "import sys; import afc_cli.ledger.postgres as pg; pg.LOCK_WAIT_S = 0.5; "
    "sys.argv = ['afc', 'status', '--ledger', sys.argv[1]]; "
    "from afc_cli.cli import main; main()"
)


@pytest.fixture
def older_ledger(afc, pg_url) -> str:
    afc.write_manifest(manifest(jobs(2)))
    result = afc("submit", "manifest.yaml", "--no-run", "--ledger", pg_url)
    assert result.returncode == 0, result.stderr
    _before_last_migration(pg_url, afc)
    return pg_url


def _held(url: str) -> psycopg.Connection:
    """A psql session that fixed a job by hand and left its transaction open."""
    holder = psycopg.connect(url)
    holder.execute("UPDATE jobs SET updated_at = updated_at WHERE key = 'shot-001'")
    return holder


def _refused(result) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    line = result.stderr.strip()
    assert LAST in line and "pg_stat_activity" in line, line
    assert "cannot connect" not in line, line


def test_a_migration_behind_a_sessions_lock_is_refused_naming_it(afc, older_ledger):
    holder = _held(older_ledger)
    try:
        held = afc("status", "--ledger", older_ledger, env=SHORT_LOCK_WAIT, timeout=60)
    finally:
        holder.rollback()
        holder.close()
    _refused(held)
    assert LAST not in _applied(older_ledger, afc)  # nothing migrated
    done = afc("status", "--ledger", older_ledger)
    assert done.returncode == 0, done.stderr
    assert LAST in _applied(older_ledger, afc)


def test_a_migration_bounds_its_lock_wait_when_nothing_else_does(afc, older_ledger):
    """PostgreSQL's default lock_timeout (0) waits for ever: the migration sets afc's bound."""
    holder = _held(older_ledger)
    try:
        try:
            held = subprocess.run(
                [sys.executable, "-c", STATUS_WITH_SHORT_BOUND, older_ledger],
                cwd=afc.cwd,
                env=afc.env,
                capture_output=True,
                text=True,
                timeout=30,
            )
        except subprocess.TimeoutExpired:
            pytest.fail("the migration waited for ever on a lock a psql session held")
    finally:
        holder.rollback()
        holder.close()
    _refused(held)
    assert "0.5s" in held.stderr, held.stderr
    assert LAST not in _applied(older_ledger, afc)


def test_a_migration_the_servers_statement_timeout_cancels_says_so(afc, older_ledger):
    """A statement_timeout set for afc's role (here in PGOPTIONS) shorter than the migration
    takes (a large ledger's index; here its wait behind the session's lock) cancels it: that
    was 'cannot connect to the ledger', and it says what cancelled it and the fix."""
    holder = _held(older_ledger)
    try:
        held = afc(
            "status",
            "--ledger",
            older_ledger,
            env={"PGOPTIONS": "-c statement_timeout=1000"},
            timeout=60,
        )
    finally:
        holder.rollback()
        holder.close()
    assert held.returncode == 2, held.stderr
    line = held.stderr.strip()
    assert LAST in line and "statement_timeout" in line, line
    assert "cannot connect" not in line and "Traceback" not in line, line
    assert LAST not in _applied(older_ledger, afc)
