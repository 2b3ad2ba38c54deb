"""The webhook outbox drained by ``afc worker`` on several hosts sharing one PostgreSQL ledger
(``AFC_HOST_ID`` gives each worker a host of its own, so only lease expiry frees what a dead
one held), against a receiver on 127.0.0.1 that records every request: every delivery arrives
at least once with its stable id, none twice while a lease on it is live, and the one a worker
was killed in the middle of posting arrives once more, after that lease expired."""

from __future__ import annotations

import collections
import signal
import subprocess
import time

import pytest
from conftest import jobs, manifest
from receiver import Receiver
from standardwebhooks.webhooks import Webhook
from test_postgres_e2e import PgAfc
from test_webhooks import SECRET


@pytest.fixture
def pg(tmp_path, pg_url) -> PgAfc:
    return PgAfc(tmp_path, pg_url)


@pytest.fixture
def receiver():
    r = Receiver().start()
    yield r
    r.stop()


def _until(check, timeout: float = 60, what: str = "", pg: PgAfc | None = None) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return
        time.sleep(0.02)
    state = (
        pg.rows("SELECT id, status, attempts, lease_owner, last_error FROM deliveries")
        if pg
        else ""
    )
    raise AssertionError(f"timed out waiting for {what}: {state}")


def _worker(pg: PgAfc, host: str):
    return pg.popen(
        "worker",
        "--poll",
        "0.2",
        "--concurrency",
        "2",
        "--claim",
        "3",
        "-q",
        env={"AFC_HOST_ID": host, "AFC_LEASE_S": "3", "AFC_HOOK_SECRET": SECRET},
    )


def _hooked(pg: PgAfc, receiver: Receiver, n: int) -> None:
    data = manifest(jobs(n))
    data["webhook"] = {"url": receiver.url, "secret_env": "AFC_HOOK_SECRET", "timeout_s": 5}
    pg.write_manifest(data)
    result = pg("submit", "manifest.yaml", "--no-run", env={"AFC_HOOK_SECRET": SECRET})
    assert result.returncode == 0, result.stderr


def _stop(workers) -> None:
    """SIGTERM stops an idle worker: each exits 0 (one that does not is killed, and fails)."""
    for proc in workers:
        proc.send_signal(signal.SIGTERM)
    for proc in workers:
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(f"a worker ignored SIGTERM: {proc.stderr.read()}") from None
        assert code == 0, proc.stderr.read()


def test_three_workers_deliver_every_event_once(pg, receiver):
    n = 30
    _hooked(pg, receiver, n)
    receiver.default = (200, 0.05, {})  # a little slow: the workers' drains overlap
    workers = [_worker(pg, host) for host in ("host-a", "host-b", "host-c")]
    try:
        _until(
            lambda: (
                pg.rows("SELECT COUNT(*) FROM deliveries WHERE status = 'delivered'")[0][0] >= n
            ),
            what="every delivery delivered",
            pg=pg,
        )
    finally:
        _stop(workers)
    job_ids = [row[0] for row in pg.rows("SELECT id FROM jobs")]
    ids = [r.headers["webhook-id"] for r in receiver.received]
    assert sorted(ids) == sorted(f"{job_id}:job.succeeded" for job_id in job_ids), (
        "each delivery arrived exactly once, under its stable id"
    )
    wh = Webhook(SECRET)
    assert all(wh.verify(r.body, r.headers)["type"] == "job.succeeded" for r in receiver.received)
    rows = pg.rows("SELECT status, attempts, lease_owner FROM deliveries")
    assert set(rows) == {("delivered", 1, None)}
    # the hosts shared the jobs, and so the events they announced
    hosts = {row[0].split(":")[0] for row in pg.rows("SELECT DISTINCT owner FROM attempts")}
    assert len(hosts) >= 2


def test_a_worker_killed_mid_post_leaves_its_delivery_to_be_sent_again_after_its_lease(
    pg, receiver
):
    n = 12
    _hooked(pg, receiver, n)
    # the first request is answered only after 3 s (within its 5 s timeout): its sender is
    # killed while it waits for the answer
    receiver.script = [(200, 3.0, {})]
    workers = {host: _worker(pg, host) for host in ("host-a", "host-b", "host-c")}
    try:
        _until(lambda: receiver.received, what="a first delivery")
        first = receiver.received[0]
        held = first.headers["webhook-id"]
        ((owner, expires),) = pg.rows(
            "SELECT lease_owner, lease_expires FROM deliveries WHERE id = ?", (held,)
        )
        sender = owner.split(":")[0]
        workers[sender].send_signal(signal.SIGKILL)
        assert workers[sender].wait(timeout=30) == -signal.SIGKILL
        # its lease is live: nobody posts it meanwhile
        assert expires > pg.rows("SELECT EXTRACT(EPOCH FROM clock_timestamp())")[0][0]
        _until(
            lambda: (
                pg.rows("SELECT COUNT(*) FROM deliveries WHERE status = 'delivered'")[0][0] >= n
            ),
            timeout=90,
            what="every delivery delivered",
            pg=pg,
        )
    finally:
        _stop([proc for host, proc in workers.items() if proc.poll() is None])

    job_ids = [row[0] for row in pg.rows("SELECT id FROM jobs")]
    expected = {f"{job_id}:job.succeeded" for job_id in job_ids}
    counts = collections.Counter(r.headers["webhook-id"] for r in receiver.received)
    assert set(counts) == expected, "every delivery arrived at least once"
    assert counts[held] == 2 and all(c == 1 for d, c in counts.items() if d != held), counts
    again = [r for r in receiver.received if r.headers["webhook-id"] == held][1]
    # resent only once the dead worker's lease had expired (the receiver and the database
    # server read this machine's one clock), with the same id and the same body
    assert again.at >= expires
    assert again.body == first.body
    wh = Webhook(SECRET)
    assert wh.verify(again.body, again.headers) == wh.verify(first.body, first.headers)
    ((status, owner),) = pg.rows("SELECT status, lease_owner FROM deliveries WHERE id = ?", (held,))
    assert (status, owner) == ("delivered", None)
