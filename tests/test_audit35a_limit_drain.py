"""A worker whose job waits on a provider's shared ``per_minute`` limit (another process's
calls filled the minute) and is told to stop (SIGTERM, ``systemctl stop``): that job is in
no call, so the drain ends it at once. It counted as a call in flight: the worker waited out
the whole ``--grace`` for a wait of up to 90 s, then said it abandoned calls 'possibly
paid', where no request had been sent."""

from __future__ import annotations

import signal
import time

import pytest
from conftest import jobs, manifest
from test_postgres_e2e import PgAfc


@pytest.fixture
def pg(tmp_path, pg_url) -> PgAfc:
    return PgAfc(tmp_path, pg_url)


def test_a_worker_waiting_on_a_shared_per_minute_limit_stops_at_once(pg):
    limits = {"local": {"per_minute": 1}}
    pg.write_manifest(manifest(jobs(1), batch="first", limits=limits), "first.yaml")
    pg.write_manifest(manifest(jobs(1), batch="second", limits=limits), "second.yaml")
    # another process's call fills the provider's minute across the ledger
    done = pg("submit", "first.yaml")
    assert done.returncode == 0, done.stderr
    assert pg("submit", "second.yaml", "--no-run").returncode == 0
    worker = pg.popen(
        "worker", "--batch", "second", "--poll", "0.2", "--grace", "20",
        env={"AFC_HOST_ID": "host-b"},
    )  # fmt: skip
    deadline = time.time() + 30
    while not pg.rows("SELECT COUNT(*) FROM jobs WHERE lease_owner LIKE 'host-b:%'")[0][0]:
        assert worker.poll() is None, worker.stderr.read()
        assert time.time() < deadline, "the worker never claimed the job"
        time.sleep(0.05)
    time.sleep(2)  # its attempt refused by the shared limit: it waits out the minute
    worker.send_signal(signal.SIGTERM)
    started = time.monotonic()
    code = worker.wait(timeout=60)
    took = time.monotonic() - started
    err = worker.stderr.read()
    assert code == 0, err
    assert took < 10, f"the drain waited {took:.1f}s for a job in no call: {err}"
    assert "abandoning" not in err and "possibly paid" not in err, err
    # nothing was sent for the second batch, nothing recorded as possibly paid
    assert pg.rows("SELECT COUNT(*) FROM attempts") == [(1,)]
    assert pg.rows("SELECT status, lease_owner FROM jobs WHERE batch = 'second'") == [
        ("queued", None)
    ]
