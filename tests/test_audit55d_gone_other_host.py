"""Outside audit 55d, storage: on a PostgreSQL ledger shared by hosts that each spool on their
own disk, a job whose upload landed and whose read-back failed waits at its verify step
with its paid render in host-a's spool. The object is gone from the bucket before the next
run (a person tidying it, a lifecycle rule, a store that lost the write), and host-a's
lease on the job has run out (its worker stopped). Host-b's run took the job, found no
object and no spool file of its own, and failed it VERIFY_FAILED: 'no spool file is left
for it ... the next run pays for a new render', and the retry that message asked for had a
worker of any host pay for the render again, while it waited in host-a's spool. Through the
real afc command, moto's S3 server behind the fault proxy of tests/s3fake.py."""

from __future__ import annotations

import pytest
from conftest import jobs, manifest
from s3fake import ProxiedBucket
from test_audit55d_gone_before_verify import ReadBackFails
from test_postgres_e2e import PgAfc


@pytest.fixture
def pg(tmp_path, pg_url) -> PgAfc:
    return PgAfc(tmp_path, pg_url)


def test_a_job_whose_upload_is_gone_waits_for_the_host_whose_spool_has_its_render(moto_server, pg):
    plan = ReadBackFails()
    s3 = ProxiedBucket(moto_server, pg, plan, "renders")
    try:
        log = pg.cwd / "calls.log"
        here = {"AFC_HOST_ID": "host-a", "AFC_LOCAL_CALL_LOG": str(log)}
        there = {**here, "AFC_HOST_ID": "host-b", "AFC_SPOOL_DIR": str(pg.cwd / "spool-b")}
        pg.write_manifest(manifest(jobs(1), storage=s3.url))
        assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
        assert pg("resume", env=here).returncode == 1
        assert pg.rows("SELECT status, step FROM jobs") == [("waiting", "verify")]
        [stored] = s3.client.list_objects_v2(Bucket=s3.bucket)["Contents"]
        s3.client.delete_object(Bucket=s3.bucket, Key=stored["Key"])
        plan.clear()
        # host-a's worker is gone: its lease on the job runs out, and host-b takes the job
        pg.rows(
            "UPDATE jobs SET lease_expires = EXTRACT(EPOCH FROM now()) - 60, lease_mono = NULL"
            " RETURNING id"
        )
        other = pg("resume", env=there)
        assert other.returncode == 1, other.stderr
        [(status, code, said)] = pg.rows(
            "SELECT status, error_code, COALESCE(error_message, waiting_reason) FROM jobs"
        )
        assert (status, code) != ("failed", "VERIFY_FAILED"), said
        assert "host-a" in said, said
        assert len(log.read_text().splitlines()) == 1, "the render was paid for again"

        pg.rows(
            "UPDATE jobs SET lease_expires = EXTRACT(EPOCH FROM now()) - 60, lease_mono = NULL"
            " RETURNING id"
        )
        done = pg("resume", env=here)
        assert done.returncode == 0, done.stderr
        assert pg.rows("SELECT status FROM jobs") == [("succeeded",)]
        assert len(log.read_text().splitlines()) == 1, "the render was paid for again"
        assert s3.client.head_object(Bucket=s3.bucket, Key=stored["Key"])["ContentLength"] > 0
    finally:
        plan.release()
        s3.proxy.shutdown()
