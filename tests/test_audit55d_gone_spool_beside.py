"""Outside audit 55d, storage: on a PostgreSQL ledger (whose spool is ``AFC_SPOOL_DIR``, else
``./afc-spool`` of the working folder) a job whose upload landed and whose read-back failed
waits at its verify step, its paid render in the spool of the run that rendered it. The
object is gone from the bucket before the next run, an 'afc resume' on the same host from
another folder (or without the worker's AFC_SPOOL_DIR). That run found no file in its own
spool, failed the job VERIFY_FAILED ('no spool file is left for it'), and the retry it asked
for paid for the render again, while the render sat in the other folder of this host; a
store step copies it from there (``pipeline._copy_beside``). Through the real afc command,
moto's S3 server behind the fault proxy of tests/s3fake.py."""

from __future__ import annotations

import pytest
from conftest import jobs, manifest
from s3fake import ProxiedBucket
from test_audit55d_gone_before_verify import ReadBackFails
from test_postgres_e2e import PgAfc


@pytest.fixture
def pg(tmp_path, pg_url) -> PgAfc:
    return PgAfc(tmp_path, pg_url)


def test_an_upload_gone_before_its_read_back_is_stored_from_another_spool_of_the_host(
    moto_server, pg
):
    plan = ReadBackFails()
    s3 = ProxiedBucket(moto_server, pg, plan, "renders")
    try:
        log = pg.cwd / "calls.log"
        env = {"AFC_LOCAL_CALL_LOG": str(log)}
        pg.write_manifest(manifest(jobs(1), storage=s3.url))
        assert pg("submit", "manifest.yaml", env=env).returncode == 1
        assert pg.rows("SELECT status, step FROM jobs") == [("waiting", "verify")]
        [stored] = s3.client.list_objects_v2(Bucket=s3.bucket)["Contents"]
        s3.client.delete_object(Bucket=s3.bucket, Key=stored["Key"])
        plan.clear()

        elsewhere = {**env, "AFC_SPOOL_DIR": str(pg.cwd / "other-folder")}
        resumed = pg("resume", env=elsewhere)
        assert resumed.returncode == 0, resumed.stderr
        assert pg.rows("SELECT status, COALESCE(error_code, '') FROM jobs") == [("succeeded", "")]
        assert len(log.read_text().splitlines()) == 1, "the render was paid for again"
        assert pg.rows("SELECT kind FROM events WHERE kind = 'spool_copied'") == [("spool_copied",)]
        assert s3.client.head_object(Bucket=s3.bucket, Key=stored["Key"])["ContentLength"] > 0
    finally:
        plan.release()
        s3.proxy.shutdown()
