"""Outside audit 51c: a worker whose claim waited behind a newer afc's migration.

A worker looks at the ledger's migrations before each claim (``Ledger.check_schema``). A newer
afc's migration is one transaction that holds ``jobs`` (PostgreSQL: ``LOCK TABLE jobs IN
EXCLUSIVE MODE``; SQLite: the write lock) for as long as it takes, minutes on a large ledger.
A worker polling meanwhile read the migrations committed before it (that look waits for no
lock), then its claim waited for the migration's lock and, once the migration committed, took
the jobs that were free (here a dead host's job whose lease had run out, the moment the
upgrade's refusal tells the operator to wait for) and paid for them with the older code on the
newer schema. Only a refill's claim looked again after claiming; a round's claim now does too,
gives the jobs back and stops, exit 2, nothing called.

The same for a run (``afc resume`` from cron, ``submit``) whose command opened the ledger
while a newer afc migrated it: its open read the migrations committed before, its claims
waited for the migration, and it paid for every job on the newer schema. A run now waits for a
migration under way before its first claim (``check_schema(wait=True)``), then stops, exit 2.

The worker is stopped (SIGSTOP) while the lease runs out and the migration takes its lock, so
that its next poll falls inside the migration, as a poll does when the migration is long.
"""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path

import psycopg
from conftest import jobs, manifest
from test_upgrade import NEWER, _rows, _sql, newer_bookkeeping

DEAD_HOST = "render-07:4242:1"  # a host that died holding the job


def _lease_ran_out(afc, ledger_url: str) -> None:
    if ledger_url.startswith("postgresql://"):
        now = "extract(epoch FROM clock_timestamp())"
    else:
        now = str(time.time())
    _sql(
        ledger_url,
        afc,
        [
            f"UPDATE jobs SET status = 'running', lease_owner = '{DEAD_HOST}',"
            f" lease_expires = {now} - 5 WHERE key = 'shot-001'"
        ],
    )


def _newer_migration(ledger_url: str) -> list[str]:
    # a newer afc's migration that changes no table this afc reads (a table of its own, as
    # m010 and m019 made; an index, as m011, m013, m014, m016-m018 and m020), as it records
    # itself
    return ["CREATE TABLE newer_things (note TEXT)", *newer_bookkeeping(ledger_url)]


def _claim_waits_on_lock(pg_url: str, timeout: float = 30) -> None:
    """Until a session of the worker waits for a lock (its claim behind the migration)."""
    deadline = time.time() + timeout
    with psycopg.connect(pg_url, autocommit=True) as look:
        while time.time() < deadline:
            row = look.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND query LIKE '%UPDATE jobs SET lease_owner%'"
            ).fetchone()
            if row[0]:
                return
            time.sleep(0.02)
    raise AssertionError("the worker's claim never waited for the migration's lock")


def _run_worker(afc, ledger_url: str, migrate) -> tuple[int, str, list[str]]:
    afc.write_manifest(manifest(jobs(1)))
    admitted = afc("submit", "manifest.yaml", "--no-run", "--ledger", ledger_url)
    assert admitted.returncode == 0, admitted.stderr
    _sql(ledger_url, afc, ["UPDATE jobs SET lease_owner = 'someone:1:1', lease_expires = 1e12"])
    calls = afc.cwd / "calls.log"
    worker = afc.popen(
        "worker",
        "--poll",
        "0.1",
        "--ledger",
        ledger_url,
        env={"AFC_LOCAL_CALL_LOG": str(calls), "AFC_SPOOL_DIR": str(afc.cwd / "spool")},
    )
    try:
        time.sleep(0.5)  # started, polling: the one job is another host's
        assert worker.poll() is None, worker.stderr.read()
        worker.send_signal(signal.SIGSTOP)
        try:
            _lease_ran_out(afc, ledger_url)  # that host died; its lease ran out
            migrate(worker)
        finally:
            worker.send_signal(signal.SIGCONT)
        code = worker.wait(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    stderr = worker.stderr.read()
    made = calls.read_text().splitlines() if calls.exists() else []
    return code, stderr, made


def _stopped_before_paying(afc, ledger_url: str, code: int, stderr: str, made: list[str]):
    assert made == []  # no call of the older code on the newer schema
    assert code == 2, stderr
    assert NEWER in stderr and "was migrated by a newer afc" in stderr, stderr
    assert "Traceback" not in stderr and "a bug in afc" not in stderr, stderr
    # the claim given back: no job is left leased to the stopped process
    assert {owner for (owner,) in _rows(ledger_url, afc, "SELECT lease_owner FROM jobs")} <= {
        None,
        DEAD_HOST,
    }


def test_a_claim_behind_a_postgres_migration_is_given_back(afc, pg_url):
    def migrate(worker) -> None:
        with psycopg.connect(pg_url) as conn:
            conn.execute("LOCK TABLE jobs IN EXCLUSIVE MODE")  # as afc's migration does
            worker.send_signal(signal.SIGCONT)  # its next poll, inside the migration
            _claim_waits_on_lock(pg_url)
            for statement in _newer_migration(pg_url):
                conn.execute(statement)
        # committed as the block ends: the worker's claim goes on

    code, stderr, made = _run_worker(afc, pg_url, migrate)
    _stopped_before_paying(afc, pg_url, code, stderr, made)


def test_a_claim_behind_a_sqlite_migration_is_given_back(afc):
    ledger = "afc.db"

    def migrate(worker) -> None:
        conn = sqlite3.connect(afc.cwd / ledger, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")  # the migration's write lock
            worker.send_signal(signal.SIGCONT)
            # its next poll (0.1 s) looks at the migrations, a read that waits for nothing,
            # then waits for the write lock to claim (SQLite says no more of a wait)
            time.sleep(1.0)
            for statement in _newer_migration(ledger):
                conn.execute(statement)
            conn.execute("COMMIT")
        finally:
            conn.close()

    code, stderr, made = _run_worker(afc, ledger, migrate)
    _stopped_before_paying(afc, ledger, code, stderr, made)


def _opened(proc, path, timeout: float = 30) -> None:
    """Until ``proc`` has the file ``path`` open (its ledger's open began)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        try:
            fds = list(Path(f"/proc/{proc.pid}/fd").iterdir())
            if any(fd.resolve() == path.resolve() for fd in fds):
                return
        except OSError:
            pass
        time.sleep(0.02)
    raise AssertionError(f"the process never opened {path}")


def _resume_during_migration(afc, ledger_url: str, migrating) -> tuple[int, str, list[str]]:
    """'afc resume' (a cron line) started while a newer afc migrates the ledger: its open
    reads the migrations committed before, then its run's claims waited for the migration's
    lock and ran every job on the newer schema."""
    afc.write_manifest(manifest(jobs(2)))
    admitted = afc("submit", "manifest.yaml", "--no-run", "--ledger", ledger_url)
    assert admitted.returncode == 0, admitted.stderr
    calls = afc.cwd / "calls.log"
    env = {"AFC_LOCAL_CALL_LOG": str(calls), "AFC_SPOOL_DIR": str(afc.cwd / "spool")}
    with migrating() as commit:
        resume = afc.popen("resume", "--ledger", ledger_url, env=env)
        try:
            commit(resume)
            code = resume.wait(timeout=60)
        finally:
            if resume.poll() is None:
                resume.kill()
                resume.wait()
    made = calls.read_text().splitlines() if calls.exists() else []
    return code, resume.stderr.read(), made


def test_a_resume_opened_during_a_postgres_migration_waits_for_it_and_stops(afc, pg_url):
    from contextlib import contextmanager

    from afc_cli.ledger.postgres import MIGRATION_LOCK

    @contextmanager
    def migrating():
        with psycopg.connect(pg_url) as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            conn.execute("LOCK TABLE jobs IN EXCLUSIVE MODE")

            def commit(resume) -> None:
                deadline = time.time() + 30
                with psycopg.connect(pg_url, autocommit=True) as look:
                    while time.time() < deadline:
                        waiting = look.execute(
                            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                        ).fetchone()[0]
                        if waiting:
                            break
                        time.sleep(0.02)
                for statement in _newer_migration(pg_url):
                    conn.execute(statement)
                conn.commit()

            yield commit

    code, stderr, made = _resume_during_migration(afc, pg_url, migrating)
    _stopped_before_paying(afc, pg_url, code, stderr, made)


def test_a_resume_opened_during_a_sqlite_migration_waits_for_it_and_stops(afc):
    from contextlib import contextmanager

    ledger = "afc.db"

    @contextmanager
    def migrating():
        conn = sqlite3.connect(afc.cwd / ledger, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")  # the migration's write lock

            def commit(resume) -> None:
                # the resume opens the ledger (a read, which waits for nothing), then comes to
                # its run and waits for the write lock
                _opened(resume, afc.cwd / ledger)
                time.sleep(1.0)
                for statement in _newer_migration(ledger):
                    conn.execute(statement)
                conn.execute("COMMIT")

            yield commit
        finally:
            conn.close()

    code, stderr, made = _resume_during_migration(afc, ledger, migrating)
    _stopped_before_paying(afc, ledger, code, stderr, made)


def test_a_resume_that_waits_past_lock_timeout_for_a_migration_says_so(afc, pg_url):
    """The wait for a migration under way is bounded by the session's lock_timeout (afc's 30
    s, or the role's): a large ledger's migration outlasts it. The resume said 'another session
    held a lock on the ledger's jobs too long (a psql session left in a transaction ...)';
    it says another afc is migrating the ledger, and nothing was run."""
    from afc_cli.ledger.postgres import MIGRATION_LOCK

    afc.env["AFC_LEDGER"] = pg_url
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    with psycopg.connect(pg_url) as conn:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        resume = afc("resume", env={"PGOPTIONS": "-c lock_timeout=500"})
        conn.rollback()
    assert resume.returncode == 2, resume.stderr
    assert "another afc is migrating the ledger" in resume.stderr, resume.stderr
    assert "psql session" not in resume.stderr
    assert "Traceback" not in resume.stderr
    statuses = {job["status"] for job in afc.json("status", "--all")["jobs"]}
    assert statuses == {"queued"}
