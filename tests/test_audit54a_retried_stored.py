"""A retried job whose probe finds the render its own earlier attempt stored, that attempt
left ``unknown`` (audit 54a, mutation audit). ``pipeline._paid_here`` takes an ``unknown``
attempt named by the object's metadata as the one that paid for it; with ``unknown`` left
out of it no test failed. Then the render this ledger paid for was counted a second time in
``afc costs report``, as a render avoided at its price, while its attempt stayed of unknown
outcome and unpriced: one render paid for, shown as an unpriced call and as money saved."""

from __future__ import annotations

import collections

import pytest
from conftest import jobs, manifest
from test_postgres_connection_lost import _terminate_afc
from test_postgres_e2e import PgAfc
from test_postgres_workers import _wait


@pytest.fixture
def pg(tmp_path, pg_url) -> PgAfc:
    return PgAfc(tmp_path, pg_url)


def test_a_retried_jobs_render_stored_unrecorded_is_its_paid_attempt_not_one_avoided(pg):
    pg.write_manifest(manifest(jobs(1, latency_s=1)))
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    log = pg.cwd / "calls.log"
    env = {"AFC_LEASE_S": "3", "AFC_LOCAL_CALL_LOG": str(log)}
    worker = pg.popen("worker", "--until-idle", "--concurrency", "1", env=env)
    _wait(pg, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 1)
    # the ledger's connection is lost mid-call: the worker stores the render it could not
    # record under its output key as it stops, its attempt left 'started'
    assert _terminate_afc(pg) >= 1
    assert worker.wait(timeout=60) == 1
    assert "stored under" in worker.stderr.read()
    # a person gives the job up (its run is gone: the call is marked unknown), then retries it
    assert pg("cancel", "shot-001").returncode == 0
    assert pg.rows("SELECT status FROM attempts") == [("unknown",)]
    assert pg("retry", "shot-001").returncode == 0
    done = pg("resume", env=env)
    assert done.returncode == 0, done.stderr
    assert pg.rows("SELECT status FROM jobs") == [("succeeded",)]
    calls = collections.Counter(line.split()[0] for line in log.read_text().splitlines())
    assert sum(calls.values()) == 1, "paid once"
    # the stored object's metadata names the attempt and its cost: that attempt paid for it
    assert pg.rows("SELECT status, cost_micros FROM attempts") == [("succeeded", 50_000)]
    assert pg.rows("SELECT COUNT(*) FROM avoided") == [(0,)], "its own render counted avoided"
