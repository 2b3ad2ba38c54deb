"""A batch's S3 storage is its bucket through its endpoint, found by outside audit 20d."""

from __future__ import annotations

from conftest import jobs, manifest

from afc_cli.ledger import Ledger


def _rows(ledger_url: str, sql: str) -> list[tuple]:
    ledger = Ledger(ledger_url, create=False)
    try:
        return [tuple(row) for row in ledger.db.execute(sql).fetchall()]
    finally:
        ledger.close()


def test_a_run_through_another_s3_endpoint_is_refused_as_another_storage(
    afc,
    s3,  # noqa: F811
    moto_server,  # noqa: F811
    ledger_url,
):
    """README ("Commands"): the storage a batch resolves to is recorded with it, and a run that names
    another is refused (exit 2), so no output is rendered twice into two places. The record
    was the bucket's URL alone: a resume whose environment named another S3 endpoint (a cron
    job with the staging MinIO's AWS_ENDPOINT_URL_S3, R2 instead of AWS) probed and stored
    the batch's outputs in a same-named bucket of another store, finding none of those
    stored, and rendered, paid, everything not yet finished in the ledger. The endpoint is
    recorded with the batch, and a run through another (submit, resume, worker) is refused
    with both named, nothing run."""
    afc.env["AFC_LEDGER"] = ledger_url
    first = afc.env["AWS_ENDPOINT_URL_S3"]  # the S3 fixture's
    other = f"http://{moto_server[0]}:{moto_server[1]}"  # another endpoint, a bucket so named
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml", "--no-run", "--storage", s3.url).returncode == 0

    # afc plan says what the submit would do: it refuses too (it probed the other store and
    # reported every job to render, where the submit refuses)
    for command in (
        ("resume",),
        ("submit", "manifest.yaml"),
        ("worker", "--until-idle"),
        ("plan", "manifest.yaml"),
    ):
        refused = afc(*command, env={"AWS_ENDPOINT_URL_S3": other})
        assert refused.returncode == 2, (command, refused.stderr)
        assert f"through the endpoint {first}" in refused.stderr, refused.stderr
        assert f"reaches it through the endpoint {other}" in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr
    # without any endpoint named: AWS's own, another store again
    refused = afc("resume", env={"AWS_ENDPOINT_URL_S3": ""})
    assert refused.returncode == 2 and "through AWS's own endpoint" in refused.stderr
    assert _rows(ledger_url, "SELECT COUNT(*) FROM attempts") == [(0,)]
    assert _rows(ledger_url, "SELECT status FROM jobs") == [("queued",), ("queued",)]

    # the same endpoint, spelt with a closing '/': the batch's own, and it runs
    done = afc("resume", env={"AWS_ENDPOINT_URL_S3": first + "/"})
    assert done.returncode == 0, done.stderr
    assert _rows(ledger_url, "SELECT status FROM jobs") == [("succeeded",), ("succeeded",)]
    assert _rows(ledger_url, "SELECT storage_endpoint FROM batches") == [(first,)]


def test_a_batch_admitted_before_endpoints_were_recorded_takes_its_next_runs(
    afc,
    s3,  # noqa: F811
    moto_server,  # noqa: F811
):
    """A batch admitted by an afc that recorded no endpoint runs as before, and from its next
    run on keeps the endpoint that run reached it through."""
    first = afc.env["AWS_ENDPOINT_URL_S3"]
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml", "--no-run", "--storage", s3.url).returncode == 0
    ledger = Ledger(str(afc.cwd / "afc.db"), create=False)
    try:
        with ledger.tx():
            ledger.db.execute("UPDATE batches SET storage_endpoint = NULL")
    finally:
        ledger.close()
    assert afc("resume").returncode == 0
    assert afc.rows("SELECT storage_endpoint FROM batches") == [(first,)]
    other = f"http://{moto_server[0]}:{moto_server[1]}"
    afc.write_manifest(manifest(jobs(3)))  # one job more, through another endpoint
    assert afc("submit", "manifest.yaml", env={"AWS_ENDPOINT_URL_S3": other}).returncode == 2


def test_an_endpoint_no_s3_call_can_use_is_not_what_a_batch_keeps(afc, s3):  # noqa: F811
    """A submit --no-run from a shell whose endpoint lacks its scheme (``minio:9000``: no S3
    call can use it, and a run says so) does not bind the batch to it: the run from cron
    with the endpoint right takes the batch and keeps its endpoint."""
    good = afc.env["AWS_ENDPOINT_URL_S3"]
    afc.write_manifest(manifest(jobs(1)))
    typo = good.split("://", 1)[1]
    admitted = afc(
        "submit",
        "manifest.yaml",
        "--no-run",
        "--storage",
        s3.url,
        env={"AWS_ENDPOINT_URL_S3": typo},
    )
    assert admitted.returncode == 0, admitted.stderr
    assert afc.rows("SELECT storage_endpoint FROM batches") == [(None,)]
    done = afc("resume")
    assert done.returncode == 0, done.stderr
    assert afc.rows("SELECT storage_endpoint FROM batches") == [(good,)]
