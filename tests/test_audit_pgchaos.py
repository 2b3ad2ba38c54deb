"""Found by bench/chaos.py --postgres: three ``afc worker`` hosts on one PostgreSQL ledger and
one bucket, killed, stalled past their lease and drained at random, then reconciled."""

from __future__ import annotations

import pytest
import test_s3
from conftest import jobs, manifest
from s3fake import Fault
from test_postgres_e2e import PgAfc

# test_s3's fixtures: its bucket behind a fault proxy, here with this file's afc (PostgreSQL)
moto_server, s3 = test_s3.moto_server, test_s3.s3


@pytest.fixture
def afc(tmp_path, pg_url) -> PgAfc:
    return PgAfc(tmp_path, pg_url)


def test_a_worker_outlives_a_5xx_on_its_storage_check_and_holds_no_lease(afc, s3):
    """A worker checks the bucket (HEAD) before each new run loop; one 500 there, after it had
    claimed a round of jobs, ended the worker with exit 1 ('cannot use bucket'), its claimed
    jobs left leased to a dead process: other hosts could not run them before the lease ran
    out (AFC_LEASE_S, default 5 minutes). A worker runs until SIGTERM: a retryable storage
    error gives the claim back and it tries again at its next poll."""
    afc.write_manifest(manifest(jobs(4)))
    assert afc("submit", "manifest.yaml", "--storage", s3.url, "--no-run").returncode == 0
    s3.plan.add(Fault("HEAD", r".", "500", 1))
    done = afc("worker", "--until-idle", "--poll", "0.2", env={"AFC_HOST_ID": "host-a"})
    assert done.returncode == 0, done.stderr
    assert "cannot use bucket" in done.stderr  # said, not fatal
    assert afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("succeeded", 4)]
    assert afc.rows("SELECT COUNT(*) FROM jobs WHERE lease_owner IS NOT NULL") == [(0,)]
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(4,)]


def test_a_worker_refused_by_its_storage_gives_its_claim_back(afc, s3):
    """A storage error that no retry cures (the bucket is gone) still ends the worker (exit
    2), but the jobs it had claimed are released, not left leased to a dead process."""
    afc.write_manifest(manifest(jobs(3)))
    assert afc("submit", "manifest.yaml", "--storage", s3.url, "--no-run").returncode == 0
    s3.client.delete_bucket(Bucket=s3.bucket)
    refused = afc("worker", "--until-idle", "--poll", "0.2", env={"AFC_HOST_ID": "host-a"})
    assert refused.returncode == 2, refused.stderr
    assert afc.rows("SELECT COUNT(*) FROM jobs WHERE lease_owner IS NOT NULL") == [(0,)]
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(0,)]
