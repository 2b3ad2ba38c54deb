"""Outside audit 56d, storage: an S3-compatible store that takes ``If-None-Match: *`` and
ignores it (an older MinIO, Ceph RGW or SeaweedFS release, a proxy in front of the store that
drops the header) lets a second writer's upload replace afc's object between afc's upload and
its read-back (another batch, another ledger's, whose output template gives the same key). The
read-back then found the other job's object, failed the job VERIFY_FAILED and told the person
that the object carried this job's own metadata and to delete it: the other job's output.
Through the real afc command, moto's S3 server behind the fault proxy of tests/s3fake.py."""

from __future__ import annotations

import hashlib
import uuid

from conftest import jobs, manifest
from s3fake import FaultPlan, ProxiedBucket

THEIRS = b"\x89PNG another batch's render, written over afc's"


class OverwrittenAfterUpload(FaultPlan):
    """Once afc's first upload under films/ is stored, another writer's upload lands over it
    (the store ignoring its ``If-None-Match: *``, as it ignored afc's), before the proxy
    answers afc."""

    client = None
    bucket = ""
    armed = True

    def answered(self, method: str, path: str) -> None:
        if method == "PUT" and "/films/" in path and "?" not in path and self.armed:
            self.armed = False
            key = path.split(f"/{self.bucket}/", 1)[1]
            self.client.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=THEIRS,
                Metadata={
                    "afc-job-id": str(uuid.uuid4()),
                    "afc-key": "shot-001",
                    "afc-batch": "other",
                    "afc-request-hash": "ab" * 32,
                    "afc-size": str(len(THEIRS)),
                    "afc-sha256": hashlib.sha256(THEIRS).hexdigest(),
                },
            )


def test_another_writers_object_over_the_upload_at_its_read_back_is_a_conflict(moto_server, afc):
    plan = OverwrittenAfterUpload()
    s3 = ProxiedBucket(moto_server, afc, plan, "renders")
    plan.client, plan.bucket = s3.client, s3.bucket
    try:
        afc.write_manifest(manifest(jobs(1), storage=s3.url))
        result = afc("submit", "manifest.yaml")
        assert result.returncode == 1, result.stderr
        assert "Traceback" not in result.stderr
        [(job_id, status, code, message)] = afc.rows(
            "SELECT id, status, error_code, error_message FROM jobs"
        )
        assert (status, code) == ("failed", "OUTPUT_KEY_CONFLICT"), message
        assert "other/shot-001" in message, message
        assert "delete" not in message, "told to delete the other job's output"
        # the cause a person can act on: the store let a second write replace afc's object
        assert "If-None-Match" in message, message
        spooled = afc.cwd / "afc.db-spool" / f"{job_id}.spool"
        assert spooled.exists() and str(spooled) in message, "the paid render is kept"
        assert afc.rows("SELECT number, status FROM attempts") == [(1, "succeeded")]
        [stored] = s3.client.list_objects_v2(Bucket=s3.bucket)["Contents"]
        body = s3.client.get_object(Bucket=s3.bucket, Key=stored["Key"])["Body"].read()
        assert body == THEIRS, "afc never overwrites an object it did not write"
    finally:
        plan.release()
        s3.proxy.shutdown()
