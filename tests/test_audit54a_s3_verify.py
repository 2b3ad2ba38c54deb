"""S3's read-back when the checksum the store reports is not the spool file's (audit 54a,
mutation audit). ``S3Storage.verify`` compares the store's checksum with the spool's (a
multipart upload's composite one with the spool's parts), and when they differ reads the
object and hashes it. With that comparison taken as a match (``if True``) no test failed:
an object whose bytes were not the render uploaded (what the store kept differs from what it
took, same length) passed verify on the upload's 200 alone: its job would succeed and its
spool file, the paid render, be removed."""

from __future__ import annotations

import hashlib


def test_an_object_whose_checksum_is_not_the_spools_is_read_back_and_refused(
    afc, s3, tmp_path, monkeypatch
):
    from afc_cli.storage import s3 as s3mod

    # this process's S3Storage on the test's S3 (the afc child's environment)
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"):
        monkeypatch.setenv(name, afc.env[name])

    rendered = b"\x89PNG the render paid for" + bytes(range(256)) * 64
    kept = b"\x89PNG other bytes, same size" + bytes(255 - i for i in range(256)) * 64
    kept = kept[: len(rendered)]
    assert len(kept) == len(rendered) and kept != rendered
    source = tmp_path / "job.spool"
    source.write_bytes(rendered)
    # what the store holds at the key after the upload answered 200: other bytes
    s3.client.put_object(
        Bucket=s3.bucket, Key="films/b1/shot.png", Body=kept, ChecksumAlgorithm="SHA256"
    )
    storage = s3mod.S3Storage(s3.url)
    sha = hashlib.sha256(rendered).hexdigest()
    problem = storage.verify("b1/shot.png", len(rendered), sha, source)
    assert problem is not None, "an object that is not the render passed verify"
    assert "sha256" in problem and hashlib.sha256(kept).hexdigest() in problem, problem
    # the object that is the render passes
    s3.client.put_object(
        Bucket=s3.bucket, Key="films/b1/ok.png", Body=rendered, ChecksumAlgorithm="SHA256"
    )
    assert storage.verify("b1/ok.png", len(rendered), sha, source) is None
