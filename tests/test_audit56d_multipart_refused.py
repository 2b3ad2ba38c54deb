"""Outside audit 56d, storage: an output over 64 MiB goes up as a multipart upload, whose
CreateMultipartUpload carries ``x-amz-checksum-algorithm: SHA256``. An S3-compatible store
that takes a single upload's SHA-256 checksum but not a multipart upload's answers that one
501 NotImplemented: the batch's stills are stored and its videos refused. The job waited
with its render in the spool (right), but the message said the store did not support
create-only writes and SHA-256 checksums, the very requests its other outputs were stored
with, naming neither the multipart upload nor the size that makes one. Through the real afc
command, a 70 MiB render from the fake Replicate (tests/fakeproviders.py), moto's S3 server
behind the fault proxy of tests/s3fake.py."""

from __future__ import annotations

from s3fake import Fault
from test_output_spill import write


def test_a_store_refusing_a_multipart_uploads_checksum_says_so_and_keeps_the_render(afc, fake, s3):
    write(afc, ["big-out-70 shot"])
    s3.plan.add(Fault("POST", r"/films/.*\?uploads", "notimplemented", -1))
    result = afc("submit", "manifest.yaml", "--storage", s3.url)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    [(job_id, status, step, reason)] = afc.rows("SELECT id, status, step, waiting_reason FROM jobs")
    assert (status, step) == ("waiting", "store"), reason
    assert "multipart upload" in reason and "over 64 MiB" in reason, reason
    assert afc.rows("SELECT number, status FROM attempts") == [(1, "succeeded")]
    spooled = afc.cwd / "afc.db-spool" / f"{job_id}.spool"
    assert spooled.stat().st_size == 70 << 20, "the paid render is kept"
    s3.plan.clear()  # a store that takes them
    assert afc("resume").returncode == 0
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert afc.rows("SELECT number, status FROM attempts") == [(1, "succeeded")]
    assert fake.counts["replicate_submit"] == 1, "rendered once"
