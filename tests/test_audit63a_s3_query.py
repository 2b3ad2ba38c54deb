"""An ``s3://`` storage URL with a query string (audit 63a).

``s3://BUCKET/PREFIX?region=eu-west-1`` is how the Go CDK and other tools name a bucket's
region, endpoint or credentials in one URL. afc read the query as part of the prefix: every
output was stored under a prefix literally named ``films?region=...``, the region unread, and
``?aws_secret_access_key=...`` put the secret in the ledger and in every object's key in the
bucket. Such a URL is now refused before anything is written (exit 2), the query not shown;
a batch recorded with one before is still opened as it was recorded."""

from __future__ import annotations

from conftest import jobs, manifest

SECRET = "wJalrXUtnFEMI7MDENGbPxRfiCYQSECRET"


def test_a_query_string_in_an_s3_url_is_refused_before_anything_is_stored(afc, s3):
    afc.write_manifest(manifest(jobs(2)))
    for url in (
        f"{s3.url}?aws_secret_access_key={SECRET}",
        f"{s3.url}?region=eu-west-1&secret={SECRET}",
        f"s3://{s3.bucket}?secret={SECRET}",  # no prefix: the query was the bucket's name
    ):
        for command in ("plan", "submit"):
            done = afc(command, "manifest.yaml", "--storage", url)
            assert done.returncode == 2, (url, done.stderr)
            assert "an s3:// URL takes no query string" in done.stderr, done.stderr
            assert "AWS_REGION" in done.stderr, done.stderr
            assert SECRET not in done.stdout + done.stderr
            assert "Traceback" not in done.stderr
    # the manifest's own storage is said as its field
    afc.write_manifest(manifest(jobs(2), storage=f"{s3.url}?aws_secret_access_key={SECRET}"))
    done = afc("submit", "manifest.yaml")
    assert done.returncode == 2, done.stderr
    assert "field 'storage'" in done.stderr and "takes no query string" in done.stderr
    assert SECRET not in done.stdout + done.stderr
    # nothing admitted, no render paid, nothing stored, the secret in no object's key
    assert not (afc.cwd / "afc.db").exists()
    assert s3.client.list_objects_v2(Bucket=s3.bucket).get("KeyCount", 0) == 0
    assert not [path for method, path in s3.plan.seen if method == "PUT"]  # no upload sent


def test_a_batch_recorded_with_a_query_in_its_prefix_is_still_opened():
    """A batch admitted before this check keeps its recorded storage: opened as recorded (its
    outputs are under that prefix), not refused at every resume."""
    from afc_cli import storage

    opened = storage.open("s3://renders/films?region=eu-west-1")
    assert (opened.bucket, opened.prefix) == ("renders", "films?region=eu-west-1")
    assert storage.open("S3://renders/films").url == "s3://renders/films"
