"""A PostgreSQL server whose default isolation is not READ COMMITTED.

Some servers set ``default_transaction_isolation = serializable`` for every application (the
server's setting, the database's or the role's). afc's ledger writes are conditional
``UPDATE``s that READ COMMITTED re-checks on the row they lock (afc_cli/ledger/postgres.py);
under SERIALIZABLE, workers on several hosts failed each other's transactions ("could not
serialize access due to read/write dependencies among transactions"), and two of three
workers started together stopped at their first claims, exit 1, telling the operator to check
the database server and the connection to it. afc's session is READ COMMITTED now.
"""

from __future__ import annotations

import collections

import psycopg
import pytest
from conftest import jobs, manifest
from test_postgres_e2e import PgAfc
from test_postgres_workers import _worker

from afc_cli.ledger.postgres import PostgresLedger


@pytest.fixture(params=["serializable", "repeatable read"])
def pg(request, tmp_path, pg_url) -> PgAfc:
    name = pg_url.rsplit("/", 1)[1]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {name} SET default_transaction_isolation = '{request.param}'")
    return PgAfc(tmp_path, pg_url)


def test_the_ledgers_transactions_are_read_committed_whatever_the_default(pg):
    ledger = PostgresLedger(pg.url)
    try:
        with ledger.tx() as db:
            shown = db.execute("SHOW transaction_isolation").fetchone()[0]
        assert shown == "read committed"
    finally:
        ledger.close()


def test_three_hosts_drain_a_batch_whatever_the_servers_default_isolation(pg):
    n = 60
    log = pg.cwd / "calls.log"
    pg.write_manifest(manifest(jobs(n, latency_s=0.02)))
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    workers = {host: _worker(pg, host, log) for host in ("host-a", "host-b", "host-c")}
    for host, worker in workers.items():
        assert worker.wait(timeout=120) == 0, (host, worker.stderr.read())
    assert pg.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("succeeded", n)]
    calls = collections.Counter(line.split()[0] for line in log.read_text().splitlines())
    assert len(calls) == n and set(calls.values()) == {1}, "each job paid for once"
