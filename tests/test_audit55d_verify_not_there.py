"""Outside audit 55d, storage: a job read back at its verify step whose object is not at its
key at all, and no spool file left on this host (its upload gone from the bucket, its spool
file removed by a clean-up). It failed VERIFY_FAILED telling the person to delete the
object first ('a retry alone finds this job's own object there again and fails the same
way'): an object that is not there, which no one can delete, and a retry alone renders the
job again. Through the real afc command, moto's S3 server behind the fault proxy of
tests/s3fake.py."""

from __future__ import annotations

from s3fake import ProxiedBucket
from test_audit55d_gone_before_verify import ReadBackFails, waiting_at_verify


def test_a_read_back_that_finds_no_object_does_not_ask_to_delete_it(moto_server, afc):
    plan = ReadBackFails()
    s3 = ProxiedBucket(moto_server, afc, plan, "renders")
    try:
        job_id, stored = waiting_at_verify(afc, s3)
        s3.client.delete_object(Bucket=s3.bucket, Key=stored["Key"])
        (afc.cwd / "afc.db-spool" / f"{job_id}.spool").unlink()
        plan.clear()

        assert afc("resume").returncode == 1
        [(status, code, message)] = afc.rows("SELECT status, error_code, error_message FROM jobs")
        assert (status, code) == ("failed", "VERIFY_FAILED")
        where = f"s3://{s3.bucket}/{stored['Key']}"
        assert f"{where} is not there" in message
        assert "delete" not in message, message
        assert "'afc retry shot-001'" in message and "pays for a new render" in message
    finally:
        plan.release()
        s3.proxy.shutdown()
