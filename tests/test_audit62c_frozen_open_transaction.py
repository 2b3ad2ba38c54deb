"""Outside audit 62c: a worker frozen (SIGSTOP, Ctrl-Z, a paused VM) while its group
transaction is open keeps the rows it wrote in it locked for as long as it is frozen. A claim
skips a locked row (``SKIP LOCKED``; a takeover's look at the job's ``started`` attempts too),
so its jobs were never taken over, their leases long run out: every other worker, and each
'afc worker --until-idle' or cron 'afc resume', left them to the frozen process and waited.

Freezing a busy worker (400 jobs of 0.3 s, --concurrency 16) at a random moment 13 times on
this machine left its session 'idle in transaction' 4 times, holding 2, 13, 9 and 2 jobs that
no other worker took until it was woken (each run beside it waited out a 30 s timeout with
those jobs left). Now a run loop's session tells the server to end it when it stays idle in
a transaction for a whole lease (``idle_in_transaction_session_timeout``, AFC_LEASE_S, where
the server, the database, the role or PGOPTIONS sets none): the rows are let go and another
worker takes the jobs over as it would a frozen worker's between transactions (README,
"Leases and fencing"); the woken worker finds its connection gone and stops, exit 1."""

from __future__ import annotations

import json
import signal
import subprocess

import psycopg
from conftest import frozen_at, jobs, manifest
from pg_stalls import stop


def _worker(afc, url: str, host: str, stall: str = "") -> subprocess.Popen:
    env = {
        "AFC_LEDGER": url,
        "AFC_LEASE_S": "3",
        "AFC_HOST_ID": host,
        "AFC_TEST_FINGERPRINT": f"machine-{host}",  # two machines' workers
        "AFC_SPOOL_DIR": str(afc.cwd / f"spool-{host}"),
        "AFC_STALL_POINT": stall,
    }
    return afc.popen(
        "worker", "--until-idle", "--poll", "0.1", "--json", env=env, stdout=subprocess.PIPE
    )


def _rows(url: str, sql: str) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql).fetchall()


def test_a_worker_frozen_in_an_open_transaction_lets_its_job_go_after_a_lease(afc, pg_url):
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml", "--no-run", env={"AFC_LEDGER": pg_url}).returncode == 0
    # frozen with its paid render's answer written in the group transaction, not committed
    frozen = _worker(afc, pg_url, "host-a", stall="rendered")
    other = None
    try:
        frozen_at(frozen)
        states = _rows(
            pg_url,
            "SELECT state FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()",
        )
        assert ("idle in transaction",) in states, states
        other = _worker(afc, pg_url, "host-b")
        try:
            out, err = other.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            other.kill()
            out, err = other.communicate()
            raise AssertionError(f"host-b never took the frozen worker's job over: {err}") from None
        assert other.returncode == 0, err
        assert json.loads(out)["finished"] == 1, err
        assert _rows(pg_url, "SELECT status FROM jobs") == [("succeeded",)]
    finally:
        frozen.send_signal(signal.SIGCONT)
        try:
            _, err_a = frozen.communicate(timeout=90)
        finally:
            stop(frozen, other)
    # woken, it finds its session ended by the server and stops as a worker whose connection
    # was lost does; its call is in the ledger as possibly paid, the other host's priced
    assert frozen.returncode == 1, err_a
    assert "cannot write to the ledger" in err_a, err_a
    # and says why: its own freeze, not an outage of the server (which it sent its operator
    # to look for: 'check the database server and the connection to it')
    assert "this process was stopped or starved that long" in err_a, err_a
    assert "AFC_LEASE_S = 3 s" in err_a, err_a
    assert "check the database server" not in err_a, err_a
    attempts = _rows(pg_url, "SELECT number, status, cost_micros FROM attempts ORDER BY number")
    assert [(n, s) for n, s, _ in attempts] == [(1, "unknown"), (2, "succeeded")], attempts
    assert attempts[1][2] == 50000
    assert _rows(pg_url, "SELECT status FROM jobs") == [("succeeded",)]
