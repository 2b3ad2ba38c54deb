"""Outside audit 56d, storage: an S3-compatible store that reports no SHA-256 checksum on a
HEAD (older Ceph's S3 API, a MinIO gateway) is read back by a GET of the object
(``S3Storage._verify_by_reading``). Behind a load balancer, replicas not consistent at once
answer a request right after the upload 404 NoSuchKey for a moment: the HEAD's 404 is tried
again under the storage policy (tests/test_audit30d_storage.py), but the GET's was a 4xx not
retried. The job waited at verify at the end of the run (exit 1, a person's 'afc resume' to
finish it) though the object was there a moment later. Through the real afc command, moto's
S3 server behind the fault proxy of tests/s3fake.py."""

from __future__ import annotations

from conftest import jobs, manifest
from s3fake import Fault


def test_a_read_back_get_the_store_answers_404_a_moment_is_tried_again(afc, s3):
    s3.plan.drop_checksums = True
    s3.plan.add(Fault("GET", r"/films/", "404", 1))
    afc.write_manifest(manifest(jobs(1)))
    out = afc.json("submit", "manifest.yaml", "--storage", s3.url)
    assert out["counts"] == {"succeeded": 1}, afc.rows("SELECT waiting_reason FROM jobs")
    assert ("GET", "404") in {(m, k) for m, _, k in s3.plan.injected}
    assert afc.rows("SELECT number, status FROM attempts") == [(1, "succeeded")]
    assert not list((afc.cwd / "afc.db-spool").glob("*.spool"))
