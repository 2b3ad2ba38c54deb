"""Outside audit 55d, storage: a job whose upload landed and whose read-back failed (the store
answering 500 to every HEAD for the rest of the run) waits at its verify step with its paid
render in the spool. Before the next run the object is gone from the bucket: a person
tidying it, a lifecycle rule, a store that lost the write in a crash. Each later run read it
back again and found nothing ('not there, though the store took the upload'), never storing
the render it held, until the job was dead-lettered STORE_FAILED after five runs and a
person had to 'afc retry' it. Through the real afc command, moto's S3 server behind the
fault proxy of tests/s3fake.py."""

from __future__ import annotations

from conftest import jobs, manifest
from s3fake import Fault, FaultPlan, ProxiedBucket


class ReadBackFails(FaultPlan):
    """Once the first upload under films/ is stored, every HEAD under films/ answers 500."""

    armed = True

    def answered(self, method: str, path: str) -> None:
        if method == "PUT" and "/films/" in path and self.armed:
            self.armed = False
            self.add(Fault("HEAD", r"/films/", "500", -1))


def waiting_at_verify(afc, s3: ProxiedBucket) -> tuple[str, dict]:
    """One job whose upload landed and whose read-back failed (``ReadBackFails``), left
    waiting at its verify step by a submit: its id, and its object's listing entry."""
    afc.write_manifest(manifest(jobs(1), storage=s3.url))
    assert afc("submit", "manifest.yaml").returncode == 1
    [(job_id, status, step)] = afc.rows("SELECT id, status, step FROM jobs")
    assert (status, step) == ("waiting", "verify")
    [stored] = s3.client.list_objects_v2(Bucket=s3.bucket)["Contents"]
    return job_id, stored


def test_an_upload_gone_from_the_bucket_before_its_read_back_is_stored_again(moto_server, afc):
    plan = ReadBackFails()
    s3 = ProxiedBucket(moto_server, afc, plan, "renders")
    try:
        job_id, stored = waiting_at_verify(afc, s3)
        spooled = afc.cwd / "afc.db-spool" / f"{job_id}.spool"
        render = spooled.read_bytes()
        s3.client.delete_object(Bucket=s3.bucket, Key=stored["Key"])
        plan.clear()

        resumed = afc("resume")
        assert resumed.returncode == 0, resumed.stderr
        assert afc.rows("SELECT status, step FROM jobs") == [("succeeded", "done")]
        assert afc.rows("SELECT number, status FROM attempts") == [(1, "succeeded")], (
            "no second render"
        )
        body = s3.client.get_object(Bucket=s3.bucket, Key=stored["Key"])["Body"].read()
        assert body == render, "the spooled render is what is stored"
        assert not spooled.exists()
        puts = [path for method, path in plan.seen if method == "PUT" and "/films/" in path]
        assert len(puts) == 1, "stored again once, create-only"
        [(kind,)] = afc.rows("SELECT kind FROM events WHERE kind = 'stored_again'")
    finally:
        plan.release()
        s3.proxy.shutdown()
