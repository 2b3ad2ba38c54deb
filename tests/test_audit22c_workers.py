"""Found by outside audit 22c, of one PostgreSQL ledger shared by several machines (README "Running on several machines"
"Beyond one machine"): ``afc worker``/``afc resume`` on hosts told apart by ``AFC_HOST_ID``,
each with its own spool, and the operator commands run from another host."""

from __future__ import annotations

import pytest
from conftest import jobs, manifest
from s3fake import Fault
from test_postgres_e2e import PgAfc

from afc_cli.owner import machine_fingerprint

# host-a's spool hold (owner.host_lease): host:0:0 and this machine's fingerprint
HOST_A_HOLD = ":".join(filter(None, ["host-a:0:0", machine_fingerprint()]))


@pytest.fixture
def afc(tmp_path, pg_url) -> PgAfc:
    return PgAfc(tmp_path, pg_url)


@pytest.fixture
def pg(afc) -> PgAfc:
    return afc


def test_a_job_cancelled_while_it_waited_to_store_is_retried_on_the_host_of_its_spool(pg, s3):
    """A job whose upload kept failing waits at its store step with its paid render in the
    spool of the host that rendered it. 'afc cancel' of it stores nothing (only a late
    result's render is stored as the cancel ends it), and 'afc retry' then queued it at the
    probe for any worker: one on another host found nothing stored and no spool file, and
    paid for the render again. The retry now leaves it at its store step, leased to the
    host whose spool holds the render, as for a job dead-lettered STORE_FAILED."""
    log = pg.cwd / "calls.log"
    here = {"AFC_HOST_ID": "host-a", "AFC_LOCAL_CALL_LOG": str(log)}
    there = {**here, "AFC_HOST_ID": "host-b", "AFC_SPOOL_DIR": str(pg.cwd / "spool-b")}
    pg.write_manifest(manifest(jobs(1), storage=s3.url))
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    s3.plan.add(Fault("PUT", r"/", "500", -1, retry_after="0"))
    assert pg("resume", env=here).returncode == 1
    assert pg.rows("SELECT status, step, lease_owner FROM jobs") == [
        ("waiting", "store", HOST_A_HOLD)
    ]
    # the operator's commands, from another machine
    assert pg("cancel", "shot-001", env=there).returncode == 0
    s3.plan.clear()
    assert pg("retry", "shot-001", env=there).returncode == 0
    pg("resume", env=there)  # another host: its spool has no such file
    assert len(log.read_text().splitlines()) == 1, "the render was paid for again"
    assert pg.rows("SELECT status, step, lease_owner FROM jobs") == [
        ("queued", "store", HOST_A_HOLD)
    ]
    done = pg("worker", "--until-idle", "--poll", "0.1", env=here)
    assert done.returncode == 0, done.stderr
    assert pg.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert len(log.read_text().splitlines()) == 1, "the render was paid for again"
    assert pg.rows("SELECT status, cost_micros FROM attempts") == [("succeeded", 50000)]


@pytest.fixture
def cut_at_connect(pg, monkeypatch):
    """Every connection afc makes is cut right after it was made, before its first statement:
    what a PostgreSQL restart (a fast shutdown ends each session with AdminShutdown) or an
    administrator's pg_terminate_backend does to an afc command that connected a moment
    before (a worker restarted by systemd while the server restarts)."""
    import psycopg

    connect = psycopg.connect

    def cut(*args, **kwargs):
        conn = connect(*args, **kwargs)
        with connect(pg.url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        return conn

    monkeypatch.setattr(psycopg, "connect", cut)


def test_a_connection_cut_as_the_ledger_opens_is_the_ledgers_error(pg, cut_at_connect):
    """The statements a PostgreSQL ledger sends as it opens (its commit setting, its applied
    migrations) ran outside the ledger's handling of a lost connection: cut then, every
    command (a worker, a cron 'afc resume', 'afc status') ended 'unexpected error:
    AdminShutdown: terminating connection due to administrator command (a bug in afc ...)',
    exit 1, found by a chaos run terminating workers' sessions as they restarted. It is the
    ledger's error now, naming the ledger, as a refused connection is; and so are the
    read-only looks 'afc plan' and a submit take before they open it."""
    from afc_cli.errors import LedgerError
    from afc_cli.ledger import Ledger
    from afc_cli.ledger.postgres import PostgresLedger, holds_ledger

    for open_it in (
        lambda: Ledger(pg.url, create=False),
        lambda: holds_ledger(pg.url),
        lambda: PostgresLedger.read_admitted(pg.url, "b1"),
        lambda: PostgresLedger.read_spool_holder(pg.url, ["x"]),
    ):
        with pytest.raises(LedgerError, match="cannot connect to the ledger postgresql://") as err:
            open_it()
        assert "terminating connection" in err.value.message


def test_a_group_commit_cut_off_by_a_lost_connection_says_so_once(afc, pg_url):
    """Under group commit (a run loop), a lost connection that surfaces in the scheduled
    commit a few milliseconds after the blocks (the server restarted meanwhile) was kept as
    the ledger's error already worded, and the run's next write worded it again: the worker
    ended 'cannot write to the ledger URL: cannot write to the ledger URL: consuming input
    failed: ... then run 'afc resume'. The run stopped; ... then run 'afc resume'' (found by a
    chaos run crashing the server under two workers). Said once now."""
    import asyncio

    import psycopg

    from afc_cli.costs import RateCards
    from afc_cli.errors import LedgerWriteError
    from afc_cli.ledger import Ledger
    from afc_cli.manifest import load_manifest

    m = load_manifest(afc.write_manifest(manifest(jobs(2))))
    ledger = Ledger(pg_url)
    try:
        ledger.admit(m, "file:///tmp/x", RateCards())
        a, b = (ledger.claim(j.job_id, 60) for j in m.jobs)

        async def run() -> str:
            with ledger.grouped(asyncio.get_running_loop()):
                ledger.note(a, "pending")  # committed by the group a moment later
                with psycopg.connect(pg_url, autocommit=True) as admin:
                    admin.execute(
                        "SELECT pg_terminate_backend(%s)", (ledger.db.raw.info.backend_pid,)
                    )
                await asyncio.sleep(0.2)  # the group's scheduled commit meets the lost session
                with pytest.raises(LedgerWriteError) as lost:
                    ledger.note(b, "refused")
                return lost.value.message

        said = asyncio.run(run())
    finally:
        ledger.close()
    assert said.count("cannot write to the ledger") == 1, said
    assert said.count("The run stopped") == 1, said
