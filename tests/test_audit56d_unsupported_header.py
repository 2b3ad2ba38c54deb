"""Outside audit 56d, storage: an S3-compatible store that does not take a header every afc
upload carries answers each upload 400 InvalidArgument naming it, not 501 NotImplemented:
Backblaze B2's S3 API refuses ``x-amz-checksum-sha256`` so ('Unsupported header
'x-amz-checksum-sha256' received for this API call.'). Its bucket's HEAD and the probes'
HEADs pass. The refusal was a 4xx like any other: the job waited with its render in the spool,
the message naming no fix, and every other job of the batch was rendered and paid for in the
same run, each one's upload refused the same way, as a 501 no longer is (audit 44b). Through
the real afc command, against moto's S3 server behind the fault proxy."""

from __future__ import annotations

import pytest
from conftest import jobs, manifest
from s3fake import Fault
from test_s3 import attempts, submit


@pytest.mark.parametrize(
    ("kind", "header"),
    [("unsupported", "x-amz-checksum-sha256"), ("unsupported-inm", "If-None-Match")],
)
def test_a_store_refusing_the_checksum_header_stops_the_batch_renders_of_the_run(
    afc, s3, kind, header
):
    """``If-None-Match``: a store without create-only writes saying so in a 400, which
    ``s3._header_refused`` names too; no test had one (a mutant leaving it out passed, and
    every job of the batch was rendered and paid for, each upload refused)."""
    afc.write_manifest(manifest(jobs(5, latency_s=1)))  # renders that take a while
    s3.plan.add(Fault("PUT", r"shot-", kind, -1))
    first = submit(afc, s3, "--concurrency", "1")
    assert first.returncode == 1, first.stderr
    assert "Traceback" not in first.stderr
    # the first job's render, and the second's, started as the first was stored (a render
    # slot is given back once its bytes are spooled); the others wait, nothing paid
    assert attempts(afc) == 2, "renders paid for whose uploads the store refuses"
    rows = dict(afc.rows("SELECT step, COUNT(*) FROM jobs GROUP BY step"))
    assert rows == {"store": 2, "probe": 3}, rows
    [reason] = {r for (r,) in afc.rows("SELECT waiting_reason FROM jobs WHERE step = 'probe'")}
    assert header in reason, reason
    assert "does not support a request afc needs" in reason, reason
    assert "no other job of b1 is rendered" in reason or "no other job of batch b1" in reason
    assert len(list((afc.cwd / "afc.db-spool").glob("*.spool"))) == 2, "renders kept"
    s3.plan.clear()  # a store that takes them (another store, or a proxy mended)
    second = afc("resume")
    assert second.returncode == 0, second.stderr
    assert afc.rows("SELECT DISTINCT status FROM jobs") == [("succeeded",)]
    assert attempts(afc) == 5, "each job rendered once"
