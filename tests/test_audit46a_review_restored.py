"""Outside audit 46a: an output gone from storage awaiting review, put back as it was, is
approved.

An approval refuses an output gone from storage, saying "Restore the file, or render it
again". On S3 a person restores it as people do, 'aws s3 cp frame.png s3://...' of a copy
(the verified bytes), which carries none of afc's metadata, and the approval then refused it
as "an object afc did not write (no afc metadata)", saying to delete it and render it again:
a second render paid for the very bytes verified and restored. Such an object is read (one
GET) and approved when it is the output verified; other bytes of the same size are still
refused (tests/test_review_gone_output.py)."""

from __future__ import annotations

from conftest import manifest


def _awaiting(afc, *args: str) -> str:
    afc.write_manifest(
        manifest(
            [
                {"key": "frame", "prompt": "the style frame", "review": True},
                {"key": "shot", "prompt": "the shot", "inputs": [{"job": "frame"}]},
            ]
        )
    )
    done = afc("submit", "manifest.yaml", *args)
    assert done.returncode == 0, done.stderr
    [(output_key,)] = afc.rows("SELECT output_key FROM jobs WHERE key = 'frame'")
    return output_key


def _approved_and_used(afc) -> None:
    approved = afc("review", "approve", "frame")
    assert approved.returncode == 0, approved.stderr
    assert afc("resume").returncode == 0
    assert dict(afc.rows("SELECT key, status FROM jobs")) == {
        "frame": "succeeded",
        "shot": "succeeded",
    }
    assert afc.rows("SELECT COUNT(*) FROM attempts")[0][0] == 2  # one render each, no more


def test_an_s3_output_restored_by_another_tool_is_approved(afc, s3):
    output_key = _awaiting(afc, "--storage", s3.url)
    [(storage,)] = afc.rows("SELECT storage FROM batches")
    prefix = storage.removeprefix(f"s3://{s3.bucket}").strip("/")
    key = f"{prefix}/{output_key}".lstrip("/")
    verified = s3.client.get_object(Bucket=s3.bucket, Key=key)["Body"].read()
    s3.client.delete_object(Bucket=s3.bucket, Key=key)
    gone = afc("review", "approve", "frame")
    assert gone.returncode == 2 and "Restore the file" in gone.stderr, gone.stderr

    s3.client.put_object(Bucket=s3.bucket, Key=key, Body=verified, ContentType="image/png")
    _approved_and_used(afc)


def test_a_folder_output_restored_without_its_metadata_file_is_approved(afc):
    output = afc.outputs() / _awaiting(afc)
    verified = output.read_bytes()
    sidecar = output.with_name(output.name + ".afc.json")
    assert sidecar.exists()
    output.unlink()
    sidecar.unlink()
    output.write_bytes(verified)
    _approved_and_used(afc)
