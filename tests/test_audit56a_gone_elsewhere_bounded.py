"""Outside audit 56a: a job whose upload is gone before its read-back, and whose paid render is
in another host's spool, is left to that host for a lease (tests/test_audit55e_gone_waits_for_
host.py). Once that lease ran out with the host not back, every other host's run that took the
job left it to that host again, for ever (a head request and a takeover each time; after 20,
a CRASH_LOOP dead letter saying 'the run working on this job ended without finishing it'),
its reason naming a host that may be gone for good. The store step's own wait for a render in
another host's spool ends after that one lease: SPOOL_MISSING, naming the host, saying to copy
the file or retry there, and that a retry without it renders and pays again. The read-back's
wait now ends the same way: after one lease, SPOOL_MISSING at the store step, nothing paid;
host-a's 'afc retry' then stores its render and pays nothing. Through the real afc command,
moto's S3 server behind the fault proxy of tests/s3fake.py, on PostgreSQL (hosts spool each on
their own disk)."""

from __future__ import annotations

import pytest
from conftest import jobs, manifest
from s3fake import ProxiedBucket
from test_audit55d_gone_before_verify import ReadBackFails
from test_postgres_e2e import PgAfc

EXPIRED = (
    "UPDATE jobs SET lease_expires = EXTRACT(EPOCH FROM now()) - 60, lease_mono = NULL RETURNING id"
)


@pytest.fixture
def pg(tmp_path, pg_url) -> PgAfc:
    return PgAfc(tmp_path, pg_url)


def test_a_gone_upload_waits_one_lease_for_the_host_with_its_render_then_is_dead_lettered(
    moto_server, pg
):
    plan = ReadBackFails()
    s3 = ProxiedBucket(moto_server, pg, plan, "renders")
    try:
        log = pg.cwd / "calls.log"
        here = {"AFC_HOST_ID": "host-a", "AFC_LOCAL_CALL_LOG": str(log)}
        there = {**here, "AFC_HOST_ID": "host-b", "AFC_SPOOL_DIR": str(pg.cwd / "spool-b")}
        pg.write_manifest(manifest(jobs(1), storage=s3.url))
        assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
        assert pg("resume", env=here).returncode == 1
        [stored] = s3.client.list_objects_v2(Bucket=s3.bucket)["Contents"]
        s3.client.delete_object(Bucket=s3.bucket, Key=stored["Key"])
        plan.clear()
        # host-b's first look leaves it to host-a's spool for a lease, as before
        pg.rows(EXPIRED)
        assert pg("resume", env=there).returncode == 1
        [(status, held)] = pg.rows("SELECT status, lease_owner FROM jobs")
        assert status == "waiting" and held.startswith("host-a:0:0"), (status, held)
        # that lease runs out, host-a not back: host-b's next look ends the wait
        pg.rows(EXPIRED)
        assert pg("resume", env=there).returncode == 1
        [(status, step, code, said)] = pg.rows(
            "SELECT status, step, error_code, error_message FROM jobs"
        )
        assert (status, step, code) == ("dead", "store", "SPOOL_MISSING"), (status, code, said)
        assert "host-a" in said and "pays again" in said, said
        assert len(log.read_text().splitlines()) == 1, "the render was paid for again"
        # host-a, back: a person's retry there stores the render, no new one paid
        retried = pg("retry", "shot-001", env=here)
        assert retried.returncode == 0, retried.stderr
        done = pg("resume", env=here)
        assert done.returncode == 0, done.stderr
        assert pg.rows("SELECT status FROM jobs") == [("succeeded",)]
        assert len(log.read_text().splitlines()) == 1, "the render was paid for again"
        assert s3.client.head_object(Bucket=s3.bucket, Key=stored["Key"])["ContentLength"] > 0
    finally:
        plan.release()
        s3.proxy.shutdown()
