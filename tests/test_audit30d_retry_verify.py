"""Outside audit 30d, storage: a job whose upload landed but whose read-back kept failing,
retried by a person on a PostgreSQL ledger shared by hosts that each spool on their own disk
(``AFC_HOST_ID``, ``AFC_SPOOL_DIR``), through the real afc command."""

from __future__ import annotations

import pytest
import test_audit30d_storage
from conftest import jobs, manifest
from s3fake import ProxiedBucket
from test_audit30d_storage import LaggingPlan
from test_postgres_e2e import PgAfc

from afc_cli.owner import machine_fingerprint

moto_server = test_audit30d_storage.moto_server

# host-a's spool hold (owner.host_lease): host:0:0 and this machine's fingerprint
HOST_A_HOLD = ":".join(filter(None, ["host-a:0:0", machine_fingerprint()]))


@pytest.fixture
def pg(tmp_path, pg_url) -> PgAfc:
    return PgAfc(tmp_path, pg_url)


@pytest.fixture
def s3(moto_server, pg):
    plan = LaggingPlan()
    ctx = ProxiedBucket(moto_server, pg, plan, "renders")
    yield ctx
    plan.release()
    ctx.proxy.shutdown()


def test_a_job_cancelled_while_it_waited_at_verify_is_retried_on_the_host_of_its_spool(pg, s3):
    """The upload was taken but the store does not show the object (404 at every read-back),
    so the job waits at verify with its paid render in host-a's spool. 'afc cancel' then
    'afc retry' from another host queued it at the probe for any worker: one on host-b found
    nothing at the key and no spool file, and paid for the render again. As for a job that
    waited at its store step, the retry now leaves it at store, leased to host-a, whose run
    stores it (the key found taken by its own upload) without paying."""
    log = pg.cwd / "calls.log"
    here = {"AFC_HOST_ID": "host-a", "AFC_LOCAL_CALL_LOG": str(log)}
    there = {**here, "AFC_HOST_ID": "host-b", "AFC_SPOOL_DIR": str(pg.cwd / "spool-b")}
    pg.write_manifest(manifest(jobs(1), storage=s3.url))
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    s3.plan.lag = 10_000
    assert pg("resume", env=here).returncode == 1
    assert pg.rows("SELECT status, step, lease_owner FROM jobs") == [
        ("waiting", "verify", HOST_A_HOLD)
    ]
    # the operator's commands, from another machine; the store still shows nothing
    assert pg("cancel", "shot-001", env=there).returncode == 0
    assert pg("retry", "shot-001", env=there).returncode == 0
    pg("resume", env=there)  # another host: its spool has no such file
    assert len(log.read_text().splitlines()) == 1, "the render was paid for again"
    assert pg.rows("SELECT status, step, lease_owner FROM jobs") == [
        ("queued", "store", HOST_A_HOLD)
    ]
    s3.plan.clear()
    s3.plan.lag = 0  # the store shows its objects again
    done = pg("worker", "--until-idle", "--poll", "0.1", env=here)
    assert done.returncode == 0, done.stderr
    assert pg.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert len(log.read_text().splitlines()) == 1, "the render was paid for again"
