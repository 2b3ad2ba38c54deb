"""Outside audit 55e: 0d4bbb2 leaves a job whose upload is gone before its read-back, and
whose paid render is in another host's spool, for that host ('a run on host host-a stores
it again'). It did so through the storage policy (``_storage_gave_up``): each run of
another host counted a storage failure and leased the job to its own host (the one without
the render) for the pause, so host-a's run, back, could not take it; after four such runs
(minutes, host-a's worker away for a reboot) the job was dead-lettered STORE_FAILED 'Fix the
storage, then afc retry', storage that had nothing to fix, and a person had to act. The job
is now left to host-a's spool hold for a lease, no failure counted: host-a's run takes it
at once and stores the render, no new one paid. Through the real afc command, moto's S3
server behind the fault proxy of tests/s3fake.py, on PostgreSQL (hosts spool each on their
own disk)."""

from __future__ import annotations

import pytest
from conftest import jobs, manifest
from s3fake import ProxiedBucket
from test_audit55d_gone_before_verify import ReadBackFails
from test_postgres_e2e import PgAfc

EXPIRED = (
    "UPDATE jobs SET lease_expires = EXTRACT(EPOCH FROM now()) - 60, lease_mono = NULL RETURNING id"
)


@pytest.fixture
def pg(tmp_path, pg_url) -> PgAfc:
    return PgAfc(tmp_path, pg_url)


def test_a_gone_upload_waits_for_the_host_with_its_render_while_others_look(moto_server, pg):
    plan = ReadBackFails()
    s3 = ProxiedBucket(moto_server, pg, plan, "renders")
    try:
        log = pg.cwd / "calls.log"
        here = {"AFC_HOST_ID": "host-a", "AFC_LOCAL_CALL_LOG": str(log)}
        there = {**here, "AFC_HOST_ID": "host-b", "AFC_SPOOL_DIR": str(pg.cwd / "spool-b")}
        pg.write_manifest(manifest(jobs(1), storage=s3.url))
        assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
        assert pg("resume", env=here).returncode == 1
        [(failures,)] = pg.rows("SELECT store_failures FROM jobs")
        [stored] = s3.client.list_objects_v2(Bucket=s3.bucket)["Contents"]
        s3.client.delete_object(Bucket=s3.bucket, Key=stored["Key"])
        plan.clear()
        # host-b's worker looks (the pause's lease over); once host-a's lease has run out
        # too, its next look dead-letters the job SPOOL_MISSING, as the store step's own
        # wait for another host's spool does (tests/test_audit56a_gone_elsewhere_bounded.py)
        pg.rows(EXPIRED)
        assert pg("resume", env=there).returncode == 1
        [(status, code, held, count, said)] = pg.rows(
            "SELECT status, error_code, lease_owner, store_failures, waiting_reason FROM jobs"
        )
        assert (status, code) == ("waiting", None), said
        assert held.startswith("host-a:0:0"), held  # left to host-a's spool
        assert count == failures, "no storage failure counted"
        assert "in the spool of host host-a" in said, said
        # host-a's run, back, takes it at once (its lease is host-a's) and stores the render
        done = pg("resume", env=here)
        assert done.returncode == 0, done.stderr
        assert pg.rows("SELECT status FROM jobs") == [("succeeded",)]
        assert len(log.read_text().splitlines()) == 1, "the render was paid for again"
        assert s3.client.head_object(Bucket=s3.bucket, Key=stored["Key"])["ContentLength"] > 0
    finally:
        plan.release()
        s3.proxy.shutdown()
