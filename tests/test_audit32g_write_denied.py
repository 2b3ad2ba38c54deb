"""An S3 write refused for want of permission, which the bucket check cannot see (outside
audit 32g): a role with s3:ListBucket and s3:GetObject but not s3:PutObject on the prefix (a
read-only policy, or PutObject granted on another prefix), or without kms:GenerateDataKey
for the bucket's default encryption, answers the bucket's HEAD, and every upload 403
AccessDenied. A failed store makes the run's next probe check the storage again
(``pipeline._storage_broke``), but that check is the bucket's HEAD, which passed: every job
of the batch was rendered and paid for, each one's upload refused, the renders piling up in
the spool. Now a run whose upload was refused so renders no other job of that batch: they
wait at their probe, nothing paid, until a store of the batch succeeds (an ``afc worker``
retrying a waiting upload) or a lease's time has passed; the next run tries again."""

from __future__ import annotations

from conftest import jobs, manifest
from s3fake import Fault
from test_s3 import attempts, submit


def test_a_refused_upload_stops_the_batch_renders_of_the_run(afc, s3):  # noqa: F811
    afc.write_manifest(manifest(jobs(5, latency_s=1)))  # renders that take a while
    s3.plan.add(Fault("PUT", r"shot-", "403", -1))
    first = submit(afc, s3, "--concurrency", "1")
    assert first.returncode == 1, first.stderr
    assert "Traceback" not in first.stderr
    # the first job's render, and the second's, started as the first was stored (a render
    # slot is given back once its bytes are spooled); the others wait, nothing paid
    assert attempts(afc) == 2
    rows = dict(afc.rows("SELECT step, COUNT(*) FROM jobs GROUP BY step"))
    assert rows == {"store": 2, "probe": 3}, rows
    [reason] = {r for (r,) in afc.rows("SELECT waiting_reason FROM jobs WHERE step = 'probe'")}
    assert "AccessDenied" in reason and "no other job of batch b1 is rendered" in reason, reason
    s3.plan.clear()  # the policy fixed
    second = afc("resume")
    assert second.returncode == 0, second.stderr
    assert afc.rows("SELECT DISTINCT status FROM jobs") == [("succeeded",)]
    assert attempts(afc) == 5, "each job rendered once"
