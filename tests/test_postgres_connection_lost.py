"""A PostgreSQL ledger whose connection goes away under a real ``afc``: the server restarted
(a fast shutdown ends every session with ``AdminShutdown``), the backend terminated by an
administrator (``pg_terminate_backend``), an idle-in-transaction timeout. The run stops with
the ledger's own message and exit 1 (README, exit codes), never "a bug in afc", and the next
run finishes every job without paying again for what was recorded."""

from __future__ import annotations

import collections
import contextlib
import signal
import time

import pytest
from conftest import frozen_at, jobs, manifest
from test_postgres_e2e import PgAfc
from test_postgres_workers import _wait

LOST = "check the database server and the connection to it, then run 'afc resume'"


@pytest.fixture
def pg(tmp_path, pg_url) -> PgAfc:
    return PgAfc(tmp_path, pg_url)


def _terminate_afc(pg: PgAfc) -> int:
    """What an administrator (or a fast shutdown) does: end every other session of the
    ledger's database, the afc process's among them."""
    return len(
        pg.rows(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    )


def _stopped_cleanly(stderr: str) -> None:
    assert LOST in stderr, stderr
    assert "cannot write to the ledger postgresql://" in stderr, stderr
    for noise in (
        "unexpected error",
        "a bug in afc",
        "Traceback",
        "error ignored",
        "Unclosed",
        "..",
        "\n\t",
    ):
        assert noise not in stderr, stderr


def break_mid_run(pg: PgAfc, breaks, *, n: int, env: dict, mend=None, owner=None) -> str:
    """Submit ``n`` jobs and run a worker of ``pg`` over them 3 wide; once its 3 paid calls
    are in flight, ``breaks()`` the ledger under it, then let the calls answer. Returns the
    worker's stderr; it must have exited 1. ``mend()`` undoes the break, whatever happened;
    ``owner`` (default ``pg``) submits and reads the ledger when the worker's role may not."""
    owner = owner or pg
    release = pg.cwd / "release"
    owner.write_manifest(manifest(jobs(n)))
    assert owner("submit", "manifest.yaml", "--no-run").returncode == 0
    worker = pg.popen(
        "worker",
        "--until-idle",
        "--poll",
        "0.2",
        "--concurrency",
        "3",
        env={**env, "AFC_LOCAL_RELEASE": str(release)},
    )
    try:
        _wait(owner, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 3)
        breaks()
        release.touch()  # the paid calls in flight answer once the ledger is broken
        assert worker.wait(timeout=60) == 1
        return worker.stderr.read()
    finally:
        if mend is not None:
            mend()
        if worker.poll() is None:
            worker.kill()


def next_worker_finishes(pg: PgAfc, env: dict, *, n: int, paid_again: int = 0, owner=None):
    """The next worker finishes every job; the calls log (``AFC_LOCAL_CALL_LOG`` in ``env``)
    shows each job paid for once, at most ``paid_again`` of them twice. With none paid
    again no attempt is left of unknown outcome either."""
    owner = owner or pg
    done = pg.json("worker", "--until-idle", "--poll", "0.2", env=env)
    assert done["exit_code"] == 0
    assert owner.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("succeeded", n)]
    left = ("'started'",) if paid_again else ("'started'", "'unknown'")
    assert owner.rows(f"SELECT COUNT(*) FROM attempts WHERE status IN ({', '.join(left)})") == [
        (0,)
    ]
    log = env["AFC_LOCAL_CALL_LOG"]
    calls = collections.Counter(line.split()[0] for line in open(log).read().splitlines())
    assert len(calls) == n and sum(calls.values()) <= n + paid_again, calls


def test_a_worker_whose_connection_is_killed_mid_run_stops_with_the_ledgers_message(pg):
    def breaks():
        assert _terminate_afc(pg) >= 1

    env = {"AFC_LEASE_S": "3", "AFC_LOCAL_CALL_LOG": str(pg.cwd / "calls.log")}
    _stopped_cleanly(break_mid_run(pg, breaks, n=8, env=env))
    # only the calls in flight may be paid again
    next_worker_finishes(pg, env, n=8, paid_again=3)


@pytest.mark.parametrize("budget", [[], ["--max-spend", "10"]])
def test_a_call_in_flight_when_the_connection_is_lost_is_kept_not_paid_again(pg, budget):
    """Before: the first job whose write failed after the connection was lost cancelled every
    other job's task at once, calls in flight included: those calls had been paid and their
    renders were thrown away, and the next worker paid for each again (a server restart mid
    batch: a second bill for every call in flight on every worker). Now the run stops as at a
    signal: the calls in flight finish within the grace period, their renders go to the
    spool, and the next worker on the host adopts them without a new call. Under a budget a
    render's known cost is held in the ledger before its spool step, a write that fails
    first: the render, still in memory, is written to the spool as the run ends."""
    pg.write_manifest(
        manifest(
            [
                {"key": f"quick-{i}", "prompt": f"quick {i}", "params": {"latency_s": 1}}
                for i in range(3)
            ]
            + [{"key": "slow", "prompt": "slow", "params": {"latency_s": 6}}]
        )
    )
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    log = pg.cwd / "calls.log"
    env = {"AFC_LEASE_S": "3", "AFC_LOCAL_CALL_LOG": str(log)}
    worker = pg.popen(
        "worker", "--until-idle", "--poll", "0.2", "--concurrency", "4", *budget, env=env
    )
    _wait(pg, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 4)
    assert _terminate_afc(pg) >= 1  # the quick calls answer first, and fail their writes
    assert worker.wait(timeout=60) == 1
    stderr = worker.stderr.read()
    _stopped_cleanly(stderr)
    assert "kept in the spool" in stderr, stderr

    done = pg.json("worker", "--until-idle", "--poll", "0.2", env=env)
    assert done["exit_code"] == 0
    assert pg.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("succeeded", 4)]
    calls = collections.Counter(line.split()[0] for line in log.read_text().splitlines())
    assert sorted(calls.values()) == [1, 1, 1, 1], "every call in flight was paid once"
    # stored as the worker stopped, tagged with its cost: the spool's adoption knows none,
    # the stored object's metadata does
    assert pg.rows("SELECT cost_micros, COUNT(*) FROM attempts GROUP BY cost_micros") == [
        (50_000, 4)
    ]


def test_an_idle_worker_whose_connection_is_killed_stops_with_the_ledgers_message(pg):
    pg.write_manifest(manifest(jobs(1)))
    assert pg("submit", "manifest.yaml").returncode == 0
    worker = pg.popen("worker", "--poll", "0.2")
    _wait(pg, "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()", 2)
    time.sleep(0.5)  # polling: nothing to claim
    assert _terminate_afc(pg) >= 1
    try:
        code = worker.wait(timeout=30)
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGKILL)
    assert code == 1
    _stopped_cleanly(worker.stderr.read())


ENV = {"AFC_LEASE_S": "3", "AFC_POLL_S": "0.05"}


def _connection_lost_at_submit(pg, fake, key: str, prompt: str, *args: str) -> tuple[int, str]:
    """A worker (``args`` its options) whose one Replicate job's prediction was accepted, then
    its ledger connection lost before the request id was committed: (exit code, stderr)."""
    pg.env.update(fake.env())
    chain = [{"provider": "replicate", "model": "owner/model", "attempts": 1}]
    rates = [{"provider": "replicate", "model": "owner/model", "per_image": "0.05"}]
    pg.write_manifest(
        manifest([{"key": key, "prompt": prompt}], defaults={"chain": chain}, rates=rates)
    )
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    worker = pg.popen(
        "worker", "--until-idle", *args, env={**ENV, "AFC_STALL_POINT": "before_request_id"}
    )
    try:
        frozen_at(worker)  # the submit answered: the prediction is paid for
        assert fake.counts["replicate_submit"] == 1
        assert _terminate_afc(pg) >= 1
    finally:
        worker.send_signal(signal.SIGCONT)
    code = worker.wait(timeout=60)
    stderr = worker.stderr.read()
    _stopped_cleanly(stderr)
    return code, stderr


def test_a_submit_whose_request_id_the_lost_ledger_cannot_record_is_polled_not_paid_again(pg, fake):
    """Replicate accepted the prediction (it is paid for) and the connection was lost before
    its id was committed. Before: the call was given up on the spot, the attempt was left
    without a request id, and the next worker paid for a second prediction. Now the run stops
    as at a signal and polls the prediction to its end within the grace period; its render
    goes to the spool, and the next worker stores it without a new submit."""
    code, stderr = _connection_lost_at_submit(pg, fake, "shot", "one render")
    assert code == 1, stderr
    assert "1 paid render the ledger could not record kept in the spool" in stderr, stderr

    done = pg.json("worker", "--until-idle", "--poll", "0.2", env=ENV)
    assert done["exit_code"] == 0
    assert pg.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert fake.counts["replicate_submit"] == 1, "the prediction was paid for once"


def test_an_unrecorded_request_that_outlasts_the_grace_is_polled_by_the_next_run(pg, fake):
    """The same, with a prediction that outlasts the grace period: its id is kept beside the
    spool (``<job id>.request``) and named in the run's last lines, and the next worker on the
    host polls it instead of submitting the job again."""
    code, stderr = _connection_lost_at_submit(pg, fake, "long-shot", "hold render", "--grace", "1")
    [request_id] = fake.predictions
    assert f"job long-shot: replicate request {request_id} was submitted" in stderr, stderr
    assert "the next run on this host polls it instead of paying again" in stderr, stderr
    assert code == 1, stderr
    assert pg.rows("SELECT provider_request_id FROM attempts") == [(None,)]
    [(job_id,)] = pg.rows("SELECT id FROM jobs")
    spool = pg.cwd / "afc-spool"
    assert (spool / f"{job_id}.request").exists()

    fake.released.set()
    done = pg.json("worker", "--until-idle", "--poll", "0.2", env=ENV)
    assert done["exit_code"] == 0
    assert pg.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert fake.counts["replicate_submit"] == 1, "polled by its kept id, not paid again"
    assert pg.rows("SELECT provider_request_id, status FROM attempts") == [
        (request_id, "succeeded")
    ]
    assert [p.name for p in spool.iterdir()] == [".afc-ledger"]  # the ledger's mark alone


def test_renders_kept_by_a_worker_whose_connection_was_lost_are_found_by_another_host(pg):
    """The renders a worker kept when its ledger connection went away are also stored under
    their output keys as it stops (the storage still answers when the ledger does not). Its
    host may never come back: another host that takes the jobs over once their leases ran
    out finds them stored and records each at the cost it was paid. Before, they were only in
    the dead host's spool, and the other host paid for every one again."""
    pg.write_manifest(manifest(jobs(2, latency_s=1)))
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    log = pg.cwd / "calls.log"
    env = {"AFC_LEASE_S": "3", "AFC_LOCAL_CALL_LOG": str(log)}
    host_a = {**env, "AFC_HOST_ID": "a", "AFC_SPOOL_DIR": str(pg.cwd / "spool-a")}
    worker = pg.popen("worker", "--until-idle", "--concurrency", "2", env=host_a)
    _wait(pg, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 2)
    assert _terminate_afc(pg) >= 1  # the calls answer after the connection is gone
    assert worker.wait(timeout=60) == 1
    stderr = worker.stderr.read()
    _stopped_cleanly(stderr)
    assert "2 paid renders the ledger could not record kept in the spool" in stderr, stderr
    assert "2 of them stored under their output keys" in stderr, stderr

    time.sleep(3.2)  # host a never comes back: its leases run out
    host_b = {**env, "AFC_HOST_ID": "b", "AFC_SPOOL_DIR": str(pg.cwd / "spool-b")}
    done = pg.json("worker", "--until-idle", "--poll", "0.2", env=host_b)
    assert done["exit_code"] == 0
    assert pg.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("succeeded", 2)]
    calls = collections.Counter(line.split()[0] for line in log.read_text().splitlines())
    assert sorted(calls.values()) == [1, 1], "each render was paid for once"
    assert pg.rows("SELECT status, cost_micros FROM attempts") == [("succeeded", 50_000)] * 2


def test_every_read_after_a_lost_connection_is_the_ledgers_error(pg, pg_url):
    """The first statement after the connection was lost failed with the ledger's error, but
    psycopg then holds the connection closed, and the next read failed before its statement
    was sent, with psycopg's own "the connection is closed": in a draining run (a poll's look
    at its job, a release) that was "a bug in afc", and the calls in flight were abandoned
    into ``unknown`` (make chaos-postgres, severing every worker's connection)."""
    from afc_cli.errors import LedgerWriteError
    from afc_cli.ledger import Ledger

    ledger = Ledger(pg_url)
    try:
        assert ledger.job("no-such-job") is None
        assert _terminate_afc(pg) >= 1
        for _ in range(3):
            with pytest.raises(LedgerWriteError, match="cannot write to the ledger"):
                ledger.job("no-such-job")
    finally:
        with contextlib.suppress(Exception):
            ledger.close()


def test_reads_after_a_transaction_the_server_aborted_are_not_a_bug(pg, pg_url):
    """A write the server refused with an OperationalError while the connection stayed up (a
    lock waited for past lock_timeout, a deadlock between two workers' group transactions: the
    server aborts one) stops the run with the ledger's error, but its transaction was left
    aborted, not rolled back: the draining run's next read (a poll's look at its job) failed
    with 'InFailedSqlTransaction: current transaction is aborted' as "unexpected error ... (a
    bug in afc)", exit 1 (make chaos-postgres seed 122, a worker stalled and continued)."""
    import psycopg

    from afc_cli.errors import LedgerWriteError
    from afc_cli.ledger import Ledger

    pg.write_manifest(manifest(jobs(1)))
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    ledger = Ledger(pg_url)
    try:
        [(job_id,)] = pg.rows("SELECT id FROM jobs")
        with psycopg.connect(pg_url) as other:
            other.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (job_id,))
            with pytest.raises(LedgerWriteError, match="cannot write to the ledger"):
                with ledger.tx():
                    ledger.db.execute("SET LOCAL lock_timeout = 100")
                    ledger.db.execute("UPDATE jobs SET updated_at = 1 WHERE id = ?", (job_id,))
            other.rollback()
        for _ in range(2):  # reads go on as the run drains; its writes stay refused
            assert ledger.job(job_id)["id"] == job_id
        with pytest.raises(LedgerWriteError, match="cannot write to the ledger"):
            with ledger.tx():
                ledger.db.execute("UPDATE jobs SET updated_at = 2 WHERE id = ?", (job_id,))
    finally:
        with contextlib.suppress(Exception):
            ledger.close()
