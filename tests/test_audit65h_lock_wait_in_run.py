"""Outside audit 65h: a lock wait in a run whose stall bound a short lease made shorter.

A run loop cuts a wait on the PostgreSQL server once it lasts a third of its lease
(``PostgresLedger._bound_stalls``, outside audit 65f): ``AFC_LEASE_S=15`` cuts at 5 s. A wait
for a lock another session holds (a psql session left in a transaction, an 'afc ledger copy',
a newer afc's migration) was still given ``LOCK_WAIT_S``, 30 s, as the session's
``lock_timeout``: the stall watch cut it first and the run stopped saying "the PostgreSQL
server did not answer for 5 s ...: a backend that stopped (its server's disk hung, the process
stopped)", sending its operator to look at a server that was fine, where the ledger's own lock
error names the session to look for (pg_stat_activity). Now a run's lock waits end before its stall bound: the lock error,
said as such."""

from __future__ import annotations

import time

import psycopg
from conftest import manifest

LEASE_S = 15  # a stall bound of 5 s, the floor


def _attempts(pg_url: str) -> int:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        return conn.execute("SELECT COUNT(*) FROM attempts").fetchone()[0]


def _run_behind_a_lock(afc, pg_url: str) -> tuple[int, str]:
    data = manifest([{"key": f"k{i}", "prompt": f"slow-2s p{i}"} for i in range(3)])
    data["defaults"]["chain"] = [{"provider": "openai", "model": "gpt-image-1", "attempts": 1}]
    afc.write_manifest(data)
    env = {"AFC_LEDGER": pg_url, "AFC_LEASE_S": str(LEASE_S)}
    assert afc("submit", "manifest.yaml", "--no-run", env=env).returncode == 0
    worker = afc.popen(
        "worker",
        "--until-idle",
        "--concurrency",
        "1",
        env={**env, "AFC_SPOOL_DIR": str(afc.cwd / "spool")},
    )
    try:
        deadline = time.monotonic() + 60
        while _attempts(pg_url) < 1:
            assert worker.poll() is None, worker.stderr.read()
            assert time.monotonic() < deadline, "the call never started"
            time.sleep(0.05)
        with psycopg.connect(pg_url) as conn:  # held until the worker has ended
            conn.execute("LOCK TABLE jobs IN EXCLUSIVE MODE")
            code = worker.wait(timeout=90)
            conn.rollback()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    return code, worker.stderr.read()


def test_a_lock_wait_in_a_run_is_said_as_a_lock_not_a_hung_server(afc, fake, pg_url):
    code, stderr = _run_behind_a_lock(afc, pg_url)
    assert "Traceback" not in stderr and "a bug in afc" not in stderr, stderr
    assert code == 1, stderr
    assert "did not answer" not in stderr, stderr  # was: 'did not answer for 5 s'
    assert "another session held a lock on the ledger's jobs too long" in stderr, stderr
    assert fake.counts["openai_billed"] == 1, stderr  # the call in flight, nothing after
