"""Outside audit 55e: 0d4bbb2 leaves a job whose upload is gone before its read-back for the
host whose spool holds its paid render ('a run on host X stores it again'). Two machines
may run afc under one host id (a worker.env with AFC_HOST_ID copied to every machine, as
``_spool_missing`` already says): the render is then on the other machine, and the message
said 'in the spool of host render-01, not this host's (render-01): a run on host render-01
stores it again', naming this very host, where a run fails the same way; a person could
not tell where the file is. Through the real afc command, moto's S3 server behind the fault
proxy of tests/s3fake.py, each machine an AFC_TEST_FINGERPRINT of its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import jobs, manifest
from s3fake import ProxiedBucket
from test_audit55d_gone_before_verify import ReadBackFails
from test_postgres_e2e import PgAfc


@pytest.fixture
def pg(tmp_path, pg_url) -> PgAfc:
    return PgAfc(tmp_path, pg_url)


def test_an_upload_gone_with_its_render_on_another_machine_of_this_host_id(moto_server, pg):
    plan = ReadBackFails()
    s3 = ProxiedBucket(moto_server, pg, plan, "renders")
    try:
        log = pg.cwd / "calls.log"
        here = {
            "AFC_HOST_ID": "render-01",
            "AFC_TEST_FINGERPRINT": "machine-a",
            "AFC_LOCAL_CALL_LOG": str(log),
        }
        there = {
            **here,
            "AFC_TEST_FINGERPRINT": "machine-b",
            "AFC_SPOOL_DIR": str(pg.cwd / "spool-b"),
        }
        pg.write_manifest(manifest(jobs(1), storage=s3.url))
        assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
        assert pg("resume", env=here).returncode == 1
        assert pg.rows("SELECT status, step FROM jobs") == [("waiting", "verify")]
        [stored] = s3.client.list_objects_v2(Bucket=s3.bucket)["Contents"]
        s3.client.delete_object(Bucket=s3.bucket, Key=stored["Key"])
        plan.clear()
        pg.rows(
            "UPDATE jobs SET lease_expires = EXTRACT(EPOCH FROM now()) - 60, lease_mono = NULL"
            " RETURNING id"
        )
        # machine-a's spool folder is on machine-a's disk, not machine-b's
        [(detail,)] = pg.rows("SELECT detail_json FROM steps WHERE step = 'spool'")
        folder = Path(json.loads(detail)["dir"])
        away = folder.with_name(folder.name + "-on-machine-a")
        folder.rename(away)
        try:
            other = pg("resume", env=there)
        finally:
            away.rename(folder)
        assert other.returncode == 1, other.stderr
        [(status, said)] = pg.rows(
            "SELECT status, COALESCE(error_message, waiting_reason) FROM jobs"
        )
        assert status == "waiting", said
        assert "not this host's (render-01)" not in said, said
        assert "another machine that runs afc under this host's id (render-01)" in said, said
        assert len(log.read_text().splitlines()) == 1, "the render was paid for again"
        # machine-a's run, whose spool has the render, stores it
        pg.rows(
            "UPDATE jobs SET lease_expires = EXTRACT(EPOCH FROM now()) - 60, lease_mono = NULL"
            " RETURNING id"
        )
        done = pg("resume", env=here)
        assert done.returncode == 0, done.stderr
        assert pg.rows("SELECT status FROM jobs") == [("succeeded",)]
        assert len(log.read_text().splitlines()) == 1, "the render was paid for again"
    finally:
        plan.release()
        s3.proxy.shutdown()
