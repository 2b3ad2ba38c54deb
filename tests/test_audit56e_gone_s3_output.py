"""Outside audit 56e: 'afc retry' of a succeeded job whose S3 object was deleted since (a
person tidying the bucket, a lifecycle rule) said 'its output is stored': only a file://
output was looked for (tests/test_audit56b_gone_output.py). Through the real afc command,
moto's S3 server behind the fault proxy of tests/s3fake.py."""

from __future__ import annotations

from conftest import jobs, manifest
from test_s3 import attempts, submit


def test_retry_of_a_succeeded_job_whose_object_is_gone_says_so(afc, s3):
    """The refusal stands (exit 2, nothing changed, nothing rendered) but names the missing
    object, looked for with one HEAD; with the object there it is as before."""
    afc.write_manifest(manifest(jobs(1)))
    assert submit(afc, s3).returncode == 0
    result = afc("retry", "shot-001")
    assert result.returncode == 2, result.stderr
    assert "its output is stored" in result.stderr
    s3.client.delete_object(Bucket=s3.bucket, Key="films/b1/shot-001.png")
    result = afc("retry", "shot-001")
    assert result.returncode == 2, result.stderr
    assert "its output is stored" not in result.stderr, result.stderr
    assert "films/b1/shot-001.png is no longer there (deleted since" in result.stderr
    assert "put the object back, or submit the request under a new key" in result.stderr
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert attempts(afc) == 1  # nothing rendered again
