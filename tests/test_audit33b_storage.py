"""Outside audit 33b, storage: an upload S3 answers BadDigest or XAmzContentSHA256Mismatch
(the bytes damaged on the way; moto's server behind the fault proxy of tests/s3fake.py), and a
job ended VERIFY_FAILED by its own object at its key (replaced or damaged after its store),
through the real afc command."""

from __future__ import annotations

import hashlib
import shutil

import pytest
from conftest import jobs, manifest
from s3fake import Fault, FaultPlan, ProxiedBucket


def attempts(afc) -> list[tuple]:
    return afc.rows("SELECT number, status FROM attempts")


def spooled(afc) -> int:
    return len(list((afc.cwd / "afc.db-spool").glob("*.spool")))


@pytest.mark.parametrize("kind", ["baddigest", "sha256mismatch", "incomplete"])
def test_an_upload_damaged_on_the_way_is_sent_again_in_the_same_run(afc, s3, kind):
    """S3 refuses a PUT whose body does not match its checksum (400 BadDigest, or
    XAmzContentSHA256Mismatch for the signed payload hash): the spooled bytes, checked before
    the upload, are sent again under the storage policy, and the job succeeds in this run
    with one render. Before, the 400 was not retried: the job waited at store for the next
    run (exit 1), and an overnight batch's job stayed unstored until a person resumed it."""
    afc.write_manifest(manifest(jobs(1)))
    s3.plan.add(Fault("PUT", r"/films/", kind, 1))
    result = afc.json("submit", "manifest.yaml", "--storage", s3.url)
    assert result["counts"] == {"succeeded": 1}, afc.rows("SELECT error_message FROM jobs")
    assert [k for _, _, k in s3.plan.injected] == [kind]
    assert attempts(afc) == [(1, "succeeded")], "the render was not repeated"
    head = s3.client.head_object(Bucket=s3.bucket, Key="films/b1/shot-001.png")
    assert head["Metadata"]["afc-key"] == "shot-001"
    assert spooled(afc) == 0


@pytest.mark.parametrize("kind", ["baddigest", "sha256mismatch"])
def test_a_part_damaged_on_the_way_is_a_retryable_failure(afc, s3, kind, tmp_path, monkeypatch):
    """The multipart path: an UploadPart answered BadDigest aborts the upload and raises a
    retryable StorageError, so the store's next try uploads the file again and lands."""
    from afc_cli.storage import s3 as s3mod

    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", afc.env["AWS_ENDPOINT_URL_S3"])
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"):
        monkeypatch.setenv(name, afc.env[name])
    monkeypatch.setattr(s3mod, "MULTIPART_THRESHOLD", 6 * 1024 * 1024)
    monkeypatch.setattr(s3mod, "PART_SIZE", 5 * 1024 * 1024)
    source = tmp_path / "big.spool"
    data = bytes(range(256)) * (13 * 4096)  # 13 MiB: three parts
    source.write_bytes(data)
    meta = {"job_id": "j", "request_hash": "h", "sha256": hashlib.sha256(data).hexdigest()}
    storage = s3mod.S3Storage(s3.url)
    s3.plan.add(Fault("PUT", r"partNumber=2", kind, 1))
    with pytest.raises(s3mod.StorageError) as failed:
        storage.put_if_absent("big/video.mp4", source, meta)
    assert failed.value.retryable, str(failed.value)
    assert s3.client.list_multipart_uploads(Bucket=s3.bucket).get("Uploads", []) == []
    storage.put_if_absent("big/video.mp4", source, meta)  # the store's next try
    assert storage.verify("big/video.mp4", len(data), meta["sha256"], source) is None


class ReplacedAfterStore(FaultPlan):
    """Once the first upload under films/ has been stored, its object is replaced (straight at
    moto) by other bytes under the same afc metadata, before afc reads it back: a job's own
    object that is not its render (a copy or sync tool, a person's edit kept the metadata)."""

    client = None
    bucket = ""
    armed = True

    def answered(self, method: str, path: str) -> None:
        if method == "PUT" and "/films/" in path and self.armed:
            self.armed = False
            key = path.split("?")[0].split("/", 2)[2]
            meta = self.client.head_object(Bucket=self.bucket, Key=key)["Metadata"]
            self.client.put_object(Bucket=self.bucket, Key=key, Body=b"not it", Metadata=meta)


def failed(afc) -> tuple:
    return afc.rows("SELECT status, step, error_code, error_message FROM jobs")[0]


def test_verify_failed_on_its_own_object_says_the_way_out_and_it_works(afc, moto_server):
    """A job's read-back finds its own object (its metadata) with other bytes: VERIFY_FAILED.
    'afc retry' alone finds that object again at the probe and fails the same way (afc never
    deletes or overwrites a stored object), so the message says what to do: delete that
    object, then 'afc retry KEY', and the spooled render is stored, nothing paid again."""
    plan = ReplacedAfterStore()
    s3 = ProxiedBucket(moto_server, afc, plan, "renders")
    plan.client, plan.bucket = s3.client, s3.bucket
    try:
        afc.write_manifest(manifest(jobs(1)))
        afc.json("submit", "manifest.yaml", "--storage", s3.url, expect=1)
        status, step, code, message = failed(afc)
        assert (status, step, code) == ("failed", "verify", "VERIFY_FAILED")
        url = f"s3://{s3.bucket}/films/b1/shot-001.png"
        assert f"delete {url} (a retry alone finds" in message, message
        assert "then 'afc retry shot-001' on this host (" in message, message
        assert "pays for no new render" in message, message
        assert spooled(afc) == 1
        # what the message says a retry alone does
        afc.json("retry", "shot-001")
        afc.json("resume", expect=1)
        assert failed(afc)[2] == "VERIFY_FAILED"
        # the way out it gives
        s3.client.delete_object(Bucket=s3.bucket, Key="films/b1/shot-001.png")
        afc.json("retry", "shot-001")
        assert afc.json("resume")["counts"] == {"succeeded": 1}
        assert attempts(afc) == [(1, "succeeded")], "no new render was paid for"
        body = s3.client.get_object(Bucket=s3.bucket, Key="films/b1/shot-001.png")["Body"]
        sha = afc.rows("SELECT output_sha256 FROM jobs")[0][0]
        assert hashlib.sha256(body.read()).hexdigest() == sha
        assert spooled(afc) == 0
    finally:
        plan.release()
        s3.proxy.shutdown()


def test_verify_failed_without_a_spool_file_says_a_new_render_is_paid(afc, tmp_path):
    """A fresh ledger finds the job's own object (a file:// folder, its .afc.json sidecar
    kept) damaged since: no spool file here, so the message says the object and its metadata
    to delete and that the retry pays for a new render, which it then does."""
    out = tmp_path / "out"
    afc.write_manifest(manifest(jobs(1)))
    afc.json("submit", "manifest.yaml", "--storage", f"file://{out}")
    stored = out / "b1" / "shot-001.png"
    stored.write_bytes(b"damaged at rest")
    (afc.cwd / "afc.db").unlink()
    shutil.rmtree(afc.cwd / "afc.db-spool", ignore_errors=True)
    afc.json("submit", "manifest.yaml", "--storage", f"file://{out}", expect=1)
    status, step, code, message = failed(afc)
    assert (status, step, code) == ("failed", "verify", "VERIFY_FAILED"), message
    assert f"{stored} and its metadata {stored}.afc.json" in message, message
    assert "then 'afc retry shot-001': the next run pays for a new render" in message, message
    stored.unlink()
    (out / "b1" / "shot-001.png.afc.json").unlink()
    afc.json("retry", "shot-001")
    assert afc.json("resume")["counts"] == {"succeeded": 1}
    assert attempts(afc) == [(1, "succeeded")]  # this ledger's one render: the new one
    sha = afc.rows("SELECT output_sha256 FROM jobs")[0][0]
    assert hashlib.sha256(stored.read_bytes()).hexdigest() == sha
