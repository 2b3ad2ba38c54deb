"""Start-up: a submit checks its storage once before the first provider call (on S3, one
HeadBucket round trip, not two)."""

from __future__ import annotations

from conftest import jobs, manifest


def test_submit_checks_its_bucket_once(afc, s3):  # noqa: F811
    afc.write_manifest(manifest(jobs(1)))
    result = afc("submit", "manifest.yaml", "--storage", s3.url)
    assert result.returncode == 0, result.stderr
    bucket_heads = [seen for seen in s3.plan.seen if seen == ("HEAD", f"/{s3.bucket}")]
    assert len(bucket_heads) == 1, s3.plan.seen
