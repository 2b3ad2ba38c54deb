"""An approval looks for the output it makes ``succeeded``: a job awaiting review whose output
was deleted from storage (or cut short) after it was verified was approved all the same, a
``succeeded`` job ("stored and verified") with nothing stored under its key, which afc never
renders again: ``afc outputs`` listed a missing file and the jobs needing it failed
INPUT_UNAVAILABLE for good. It is refused now (exit 2, nothing decided), saying how to render
it again, and that way works."""

from __future__ import annotations

import pytest
from conftest import manifest


def awaiting(afc, *args: str) -> str:
    afc.write_manifest(
        manifest(
            [
                {"key": "frame", "prompt": "the style frame", "review": True},
                {"key": "shot", "prompt": "the shot", "needs": ["frame"]},
            ]
        )
    )
    done = afc("submit", "manifest.yaml", *args)
    assert done.returncode == 0, done.stderr
    [(key,)] = afc.rows("SELECT output_key FROM jobs WHERE key = 'frame'")
    return key


def decided(afc) -> int:
    return afc.rows("SELECT COUNT(*) FROM reviews")[0][0]


def status(afc, key: str) -> str:
    return afc.rows("SELECT status FROM jobs WHERE key = ?", (key,))[0][0]


def test_an_output_gone_from_storage_is_not_approved(afc):
    output = afc.outputs() / awaiting(afc)
    output.unlink()
    refused = afc("review", "approve", "frame")
    assert refused.returncode == 2, refused.stderr
    assert "is gone from storage" in refused.stderr, refused.stderr
    assert "'afc cancel frame' then 'afc retry frame'" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    assert decided(afc) == 0 and status(afc, "frame") == "awaiting_review"
    assert status(afc, "shot") == "blocked"
    # the way the message gives renders it again, and the approval then goes through
    for args in (("cancel", "frame", "--yes"), ("retry", "frame"), ("resume",)):
        done = afc(*args)
        assert done.returncode == 0, (args, done.stderr)
    assert output.exists() and status(afc, "frame") == "awaiting_review"
    approved = afc("review", "approve", "frame")
    assert approved.returncode == 0, approved.stderr
    assert status(afc, "frame") == "succeeded"


def test_an_output_cut_short_is_not_approved_and_a_rejection_needs_no_look(afc):
    output = afc.outputs() / awaiting(afc)
    output.write_bytes(output.read_bytes()[:100])
    refused = afc("review", "approve", "frame", "--json")
    assert refused.returncode == 2, refused.stderr
    assert "is 100 bytes, not the" in refused.stdout + refused.stderr
    assert decided(afc) == 0 and status(afc, "frame") == "awaiting_review"
    # a rejection makes nothing succeeded: it is taken whatever storage holds
    rejected = afc("review", "reject", "frame", "--reason", "the file was cut short")
    assert rejected.returncode == 0, rejected.stderr
    assert status(afc, "frame") == "rejected" and decided(afc) == 1


def test_an_output_in_place_is_approved(afc):
    awaiting(afc)
    approved = afc("review", "approve", "frame")
    assert approved.returncode == 0, approved.stderr
    assert status(afc, "frame") == "succeeded" and decided(afc) == 1


@pytest.mark.parametrize("copied", ["by another tool", "another output"])
def test_an_s3_output_saved_over_with_bytes_of_its_size_is_not_approved(afc, s3, copied):
    """Of the size verified, the object at the key was approved whatever it held: the HEAD
    the approval makes answers its metadata too, and an object without afc's (written by
    another tool) or with another SHA-256 (another afc output copied over it) is refused."""
    awaiting(afc, "--storage", s3.url)
    [(output_key, size)] = afc.rows("SELECT output_key, output_size FROM jobs WHERE key = 'frame'")
    [(storage,)] = afc.rows("SELECT storage FROM batches")
    prefix = storage.removeprefix(f"s3://{s3.bucket}").strip("/")
    key = f"{prefix}/{output_key}".lstrip("/")
    head = s3.client.head_object(Bucket=s3.bucket, Key=key)
    other = b"\x89PNG" + b"x" * (size - 4)
    metadata = {}
    if copied == "another output":
        metadata = dict(head["Metadata"], **{"afc-sha256": "ab" * 32})
    s3.client.put_object(Bucket=s3.bucket, Key=key, Body=other, Metadata=metadata)
    refused = afc("review", "approve", "frame")
    assert refused.returncode == 2, refused.stderr
    said = " ".join(refused.stderr.split())
    if copied == "another output":
        assert "holds another output (SHA-256 abababababab…" in said, said
    else:
        assert "holds an object afc did not write" in said, said
    assert "then 'afc cancel frame' and 'afc retry frame'" in said, said
    assert decided(afc) == 0 and status(afc, "frame") == "awaiting_review"


def test_an_s3_output_in_place_is_approved(afc, s3):
    awaiting(afc, "--storage", s3.url)
    approved = afc("review", "approve", "frame")
    assert approved.returncode == 0, approved.stderr
    assert status(afc, "frame") == "succeeded" and decided(afc) == 1
