"""A worker's loop, fed batch after batch on S3, makes one boto3 client, not one a batch
(outside audit 61f).

Every batch a run loop meets gets its own ``S3Storage`` (``run.run_jobs``, ``run._open_batches``),
and each made its own boto3 session and client on first use: some 12 MiB each (the S3 service
model loaded and parsed again). A busy worker's loop, fed claim after claim for as long as work
comes (``worker.Refill``), kept every batch's: fed 300 batches of 5 instant jobs on one bucket,
its resident memory grew from 74 MiB to 3.4 GiB. The clients are now one per process for the
environment they are made from (``storage.s3._shared_client``)."""

from __future__ import annotations

import boto3
import pytest
from conftest import jobs, manifest
from s3fake import FaultPlan, ProxiedBucket

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest
from afc_cli.storage import s3 as s3mod
from afc_cli.worker import work

BATCHES = 6


@pytest.fixture
def bucket(moto_server, afc, monkeypatch):
    plan = FaultPlan()
    ctx = ProxiedBucket(moto_server, afc, plan, "renders")
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in afc.env.items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value)
    yield ctx
    plan.release()
    ctx.proxy.shutdown()


@pytest.fixture
def clients(monkeypatch):
    """The boto3 clients made (boto3's own ``Session.client``, counted)."""
    made = []
    real = boto3.session.Session.client

    def counted(self, *args, **kwargs):
        client = real(self, *args, **kwargs)
        made.append(client)
        return client

    monkeypatch.setattr(boto3.session.Session, "client", counted)
    return made


def test_a_worker_fed_batch_after_batch_on_s3_makes_one_client(
    afc, bucket, clients, ledger_url, monkeypatch, tmp_path
):
    monkeypatch.setenv("AFC_SPOOL_DIR", str(tmp_path / "spool"))  # a PostgreSQL ledger's
    ledger = Ledger(ledger_url)
    try:
        for n in range(BATCHES):
            path = afc.write_manifest(manifest(jobs(2), batch=f"b{n}"), f"b{n}.yaml")
            ledger.admit(load_manifest(path), bucket.url, RateCards())
    finally:
        ledger.close()
    # one job a claim: each refill brings the loop one job, a new batch every second claim
    result = work(ledger_path=ledger_url, concurrency=1, claim=1, grace_s=5, until_idle=True)
    assert (result.finished, result.failed) == (2 * BATCHES, 0)
    listed = bucket.client.list_objects_v2(Bucket=bucket.bucket, Prefix="films/")
    assert listed["KeyCount"] == 2 * BATCHES
    assert len(clients) == 1  # one a batch before: 6


def test_storages_of_one_environment_share_a_client_and_another_endpoint_has_its_own(
    bucket, clients, monkeypatch
):
    first = s3mod.S3Storage(bucket.url).client
    assert s3mod.S3Storage("s3://other-bucket/x").client is first
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
    other = s3mod.S3Storage(bucket.url).client
    assert other is not first and other.meta.endpoint_url == "http://127.0.0.1:9"
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert s3mod.S3Storage(bucket.url).client.meta.region_name == "eu-west-1"
    assert len(clients) == 3
