"""Outside audit 55d, storage: a job whose upload landed and whose read-back failed waits at
its verify step with its paid render in the spool. Before the next run someone else's
object takes the key (an unconditional upload by another tool over afc's object: other
bytes, no afc metadata). The next run read it back as the job's own object, failed the job
VERIFY_FAILED and told the person that the object carries this job's own metadata and to
delete it: someone else's file. Through the real afc command, moto's S3 server behind the
fault proxy of tests/s3fake.py."""

from __future__ import annotations

from s3fake import ProxiedBucket
from test_audit55d_gone_before_verify import ReadBackFails, waiting_at_verify


def test_an_upload_replaced_by_someone_elses_object_before_its_read_back_is_a_conflict(
    moto_server, afc
):
    plan = ReadBackFails()
    s3 = ProxiedBucket(moto_server, afc, plan, "renders")
    try:
        job_id, stored = waiting_at_verify(afc, s3)
        theirs = b"\x89PNG someone else's picture, uploaded over afc's"
        s3.client.put_object(Bucket=s3.bucket, Key=stored["Key"], Body=theirs)
        plan.clear()

        resumed = afc("resume")
        assert resumed.returncode == 1, resumed.stderr
        [(status, code, message)] = afc.rows("SELECT status, error_code, error_message FROM jobs")
        assert (status, code) == ("failed", "OUTPUT_KEY_CONFLICT"), message
        assert "afc did not write" in message and "never overwrites" in message
        spooled = afc.cwd / "afc.db-spool" / f"{job_id}.spool"
        assert spooled.exists() and str(spooled) in message, "the paid render is kept"
        assert afc.rows("SELECT number, status FROM attempts") == [(1, "succeeded")]
        body = s3.client.get_object(Bucket=s3.bucket, Key=stored["Key"])["Body"].read()
        assert body == theirs, "afc never overwrites an object it did not write"

        # the way out the message names: their object moved away, a retry here stores the
        # render paid for, nothing paid again
        render = spooled.read_bytes()
        s3.client.delete_object(Bucket=s3.bucket, Key=stored["Key"])
        assert afc("retry", "shot-001").returncode == 0
        again = afc("resume")
        assert again.returncode == 0, again.stderr
        assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]
        assert afc.rows("SELECT number, status FROM attempts") == [(1, "succeeded")]
        body = s3.client.get_object(Bucket=s3.bucket, Key=stored["Key"])["Body"].read()
        assert body == render
    finally:
        plan.release()
        s3.proxy.shutdown()
