"""An S3-compatible store that reports no SHA-256 checksum on a HEAD (Backblaze B2's and older
Ceph's S3 APIs, a MinIO gateway): afc's read-back cannot compare S3's own checksum with the
render's, and reads the object back to hash it (``S3Storage._verify_by_reading``). No test
reached that path before (outside audit 52a measured it): every store of the suite is moto's,
which reports the checksum. moto's S3 server behind the fault proxy (tests/s3fake.py), which
leaves the checksum headers out of its answers (``drop_checksums``)."""

from __future__ import annotations

import hashlib

from conftest import jobs, manifest
from s3fake import Fault


def _spooled(afc) -> int:
    return len(list((afc.cwd / "afc.db-spool").glob("*.spool")))


def test_an_upload_to_a_store_without_checksums_is_read_back_and_stored(afc, s3):
    """Each output is read back (a GET of its object) and its SHA-256 compared: the job
    succeeds, its spool file gone. Would catch a read-back that failed every object of such a
    store (VERIFY_FAILED after each paid render), or took the missing checksum for a match
    without reading anything."""
    s3.plan.drop_checksums = True
    afc.write_manifest(manifest(jobs(2)))
    out = afc.json("submit", "manifest.yaml", "--storage", s3.url)
    assert out["counts"] == {"succeeded": 2}, out
    for i in (1, 2):
        key = f"films/b1/shot-{i:03d}.png"
        assert ("GET", f"/{s3.bucket}/{key}") in s3.plan.seen, "not read back"
        data = s3.client.get_object(Bucket=s3.bucket, Key=key)["Body"].read()
        sha = afc.rows("SELECT output_sha256 FROM jobs WHERE key = ?", (f"shot-{i:03d}",))[0][0]
        assert hashlib.sha256(data).hexdigest() == sha
    assert _spooled(afc) == 0


def test_a_store_without_checksums_that_reads_back_other_bytes_fails_verify(afc, s3):
    """The store hands back other bytes than it took (same length): the read-back's SHA-256
    differs, the job ends VERIFY_FAILED with its paid render kept in the spool, one attempt
    paid. Would catch a read-back that trusted the store's answer without hashing what came
    back (the damaged object taken as the job's output, its render deleted from the spool)."""
    s3.plan.drop_checksums = True
    s3.plan.damage_reads = True
    afc.write_manifest(manifest(jobs(1)))
    result = afc("submit", "manifest.yaml", "--storage", s3.url)
    assert result.returncode != 0, result.stdout
    status, step, code, message = afc.rows(
        "SELECT status, step, error_code, error_message FROM jobs"
    )[0]
    assert (status, step, code) == ("failed", "verify", "VERIFY_FAILED"), message
    assert "reads back" in message and "sha256" in message, message
    assert _spooled(afc) == 1, "the paid render was not kept"
    assert afc.rows("SELECT COUNT(*) FROM attempts")[0][0] == 1


def test_a_read_back_the_store_throttles_is_tried_again_not_a_failed_verify(afc, s3):
    """The read-back's GET answered 503 SlowDown once: a storage failure tried again under the
    storage policy, and the job succeeds on its one render. Would catch the GET's failure taken
    for what the object holds (VERIFY_FAILED: the job failed, a person's retry needed), or
    escaping the read-back unclassified."""
    s3.plan.drop_checksums = True
    s3.plan.add(Fault("GET", r"/films/b1/shot-001\.png$", "slowdown", 1))
    afc.write_manifest(manifest(jobs(1)))
    out = afc.json("submit", "manifest.yaml", "--storage", s3.url)
    assert out["counts"] == {"succeeded": 1}, out
    assert ("GET", f"/{s3.bucket}/films/b1/shot-001.png", "slowdown") in s3.plan.injected
    assert afc.rows("SELECT COUNT(*) FROM attempts")[0][0] == 1
    assert _spooled(afc) == 0
