"""A PostgreSQL backend that stops answering under a run (its server's disk hung; here
SIGSTOP) keeps its connection alive: the keepalives and ``tcp_user_timeout`` see nothing
wrong, and the run waited in its ledger write for ever, deaf to SIGTERM and to a second one
(its signals are acted on by the run loop the write held), until cron's SIGKILL left its
calls in flight unrecorded (found by outside audit 26a, not fixed there). A wait on the
server now lasts AFC_PG_STALL_S at most (``postgres.StallWatch``): the connection is cut,
the run stops as when the server ends its session, and the next run finishes the batch
paying nothing twice."""

from __future__ import annotations

import os
import signal
import time

import psycopg
import pytest
from conftest import manifest

from afc_cli.errors import UsageError
from afc_cli.ledger.postgres import StallWatch, stall_seconds

JOBS = 40


def until(ready, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def backends(url: str) -> list[int]:
    """The client backends of the ledger's database, but this connection's."""
    with psycopg.connect(url, autocommit=True) as conn:
        return [
            row[0]
            for row in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            )
        ]


def test_a_stopped_backend_ends_the_run_within_the_stall_limit(afc, pg_url):
    jobs = [{"key": f"k{i}", "prompt": f"p {i}", "params": {"latency_s": 0.3}} for i in range(JOBS)]
    afc.write_manifest(manifest(jobs))
    env = {"AFC_LEDGER": pg_url, "AFC_PG_STALL_S": "3"}
    run = afc.popen("submit", "manifest.yaml", "--concurrency", "4", env=env)
    stopped: list[int] = []
    try:
        # under way: some jobs done, more to do
        until(lambda: run.poll() is not None or len(list(afc.outputs().rglob("*.png"))) >= 4)
        assert run.poll() is None, run.stderr.read()
        stopped = backends(pg_url)
        assert stopped
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        began = time.monotonic()
        run.wait(timeout=90)  # waited for ever before
        took = time.monotonic() - began
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        if run.poll() is None:
            run.kill()
            run.wait()
    stderr = run.stderr.read()
    assert run.returncode == 1, stderr
    assert "did not answer for 3 s (AFC_PG_STALL_S)" in stderr, stderr
    assert "Traceback" not in stderr, stderr
    assert took < 60, took

    resumed = afc("resume", env=env, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    with psycopg.connect(pg_url) as conn:
        statuses = dict(conn.execute("SELECT status, COUNT(*) FROM jobs GROUP BY status"))
        paid = conn.execute("SELECT COUNT(*) FROM attempts WHERE status = 'succeeded'").fetchone()
    assert statuses == {"succeeded": JOBS}, statuses
    assert paid[0] == JOBS, "each job's render succeeded once: nothing paid twice"


def test_the_watch_cuts_only_a_wait_past_its_limit():
    """The watch itself, on a socket pair: a wait shorter than the limit is left alone; one
    that outlasts it has its socket shut down (the peer reads the end of the stream)."""
    import socket

    watch = StallWatch(0.4)
    mine, theirs = socket.socketpair()
    try:
        with watch.waiting(mine.fileno()):
            time.sleep(0.1)
        assert not watch.fired
        with watch.waiting(mine.fileno()):
            until(lambda: watch.fired, timeout=10)
        theirs.settimeout(5)
        assert theirs.recv(1) == b""  # shut down
        assert "did not answer for 0.4 s" in watch.said()
    finally:
        watch.stop()
        mine.close()
        theirs.close()


def test_a_paused_watch_cuts_nothing():
    import socket

    watch = StallWatch(0.2)
    watch.paused = True
    mine, theirs = socket.socketpair()
    try:
        with watch.waiting(mine.fileno()):
            time.sleep(1.0)
        assert not watch.fired
    finally:
        watch.stop()
        mine.close()
        theirs.close()


@pytest.mark.parametrize("value, expected", [("", 300.0), ("0", 0.0), ("2.5", 2.5)])
def test_the_limit_comes_from_the_environment(monkeypatch, value, expected):
    monkeypatch.setenv("AFC_PG_STALL_S", value)
    assert stall_seconds() == expected


@pytest.mark.parametrize("value", ["soon", "-1", "inf", "nan"])
def test_a_bad_limit_is_refused(monkeypatch, value):
    monkeypatch.setenv("AFC_PG_STALL_S", value)
    with pytest.raises(UsageError, match="AFC_PG_STALL_S"):
        stall_seconds()
