"""Outside audit 33b, storage: an upload S3 answers BadDigest or XAmzContentSHA256Mismatch
(the bytes damaged on the way; moto's server behind the fault proxy of tests/s3fake.py),
through the real afc command."""

from __future__ import annotations

import hashlib

import pytest
from conftest import jobs, manifest
from moto.server import ThreadedMotoServer
from s3fake import Fault, FaultPlan, ProxiedBucket


@pytest.fixture(scope="module")
def moto_server():
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    yield server.get_host_and_port()
    server.stop()


@pytest.fixture
def s3(moto_server, afc):
    plan = FaultPlan()
    ctx = ProxiedBucket(moto_server, afc, plan, "renders")
    yield ctx
    plan.release()
    ctx.proxy.shutdown()


def attempts(afc) -> list[tuple]:
    return afc.rows("SELECT number, status FROM attempts")


def spooled(afc) -> int:
    return len(list((afc.cwd / "afc.db-spool").glob("*.spool")))


@pytest.mark.parametrize("kind", ["baddigest", "sha256mismatch"])
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
