"""Found by outside audit 22c, of one PostgreSQL ledger shared by several machines (SPEC §12
"Beyond one machine"): ``afc worker``/``afc resume`` on hosts told apart by ``AFC_HOST_ID``,
each with its own spool, and the operator commands run from another host."""

from __future__ import annotations

import pytest
import test_s3
from conftest import jobs, manifest
from s3fake import Fault
from test_postgres_e2e import PgAfc

# test_s3's fixtures: its bucket behind a fault proxy, here with this file's afc (PostgreSQL)
moto_server, s3 = test_s3.moto_server, test_s3.s3


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
        ("waiting", "store", "host-a:0:0")
    ]
    # the operator's commands, from another machine
    assert pg("cancel", "shot-001", env=there).returncode == 0
    s3.plan.clear()
    assert pg("retry", "shot-001", env=there).returncode == 0
    pg("resume", env=there)  # another host: its spool has no such file
    assert len(log.read_text().splitlines()) == 1, "the render was paid for again"
    assert pg.rows("SELECT status, step, lease_owner FROM jobs") == [
        ("queued", "store", "host-a:0:0")
    ]
    done = pg("worker", "--until-idle", "--poll", "0.1", env=here)
    assert done.returncode == 0, done.stderr
    assert pg.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert len(log.read_text().splitlines()) == 1, "the render was paid for again"
    assert pg.rows("SELECT status, cost_micros FROM attempts") == [("succeeded", 50000)]
