"""How S3 errors are classified: what the storage policy retries, and what it tells the user."""

from __future__ import annotations

from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

from afc_cli.storage.s3 import S3Storage


def client_error(status, code, message="", headers=None, op="PutObject"):
    return ClientError(
        {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": status, "HTTPHeaders": headers or {}},
        },
        op,
    )


STORAGE = S3Storage("s3://studio-renders/films")


def classify(exc, action="cannot write"):
    return STORAGE._error(exc, action, "b1/shot.png")


def test_transient_errors_are_retried_with_retry_after():
    for status, code in (
        (503, "SlowDown"),
        (500, "InternalError"),
        (429, "TooManyRequests"),
        (400, "RequestTimeout"),
        (409, "ConditionalRequestConflict"),
    ):
        assert classify(client_error(status, code)).retryable, code
    throttled = classify(client_error(429, "TooManyRequests", headers={"retry-after": "7"}))
    assert throttled.retry_after == 7.0
    assert classify(EndpointConnectionError(endpoint_url="http://x")).retryable


def test_client_errors_are_final_and_name_the_bucket_and_the_fix():
    missing = classify(client_error(404, "NoSuchBucket", "The specified bucket does not exist"))
    assert not missing.retryable
    assert "studio-renders" in missing.message and "create bucket" in missing.message
    denied = classify(client_error(403, "AccessDenied", "Access Denied"))
    assert not denied.retryable and "AWS_ACCESS_KEY_ID" in denied.message
    bad_name = classify(client_error(400, "InvalidBucketName"))
    assert not bad_name.retryable and "not a valid bucket name" in bad_name.message
    nocreds = classify(NoCredentialsError())
    assert not nocreds.retryable and "AWS_PROFILE" in nocreds.message
    head_missing = STORAGE._error(client_error(404, "404", op="HeadBucket"), "cannot use")
    assert not head_missing.retryable and "create bucket" in head_missing.message
    # a store without conditional writes (found by an audit: retried, said nothing of why)
    unsupported = classify(client_error(501, "NotImplemented", "A header you provided implies"))
    assert not unsupported.retryable and "If-None-Match" in unsupported.message


def test_urls_and_object_keys():
    assert STORAGE.object_key("b1/shot.png") == "films/b1/shot.png"
    assert S3Storage("s3://bucket").object_key("k") == "k"
    assert S3Storage("s3://bucket/a/b/").url == "s3://bucket/a/b"


def test_a_request_botocore_refuses_is_final():
    from botocore.exceptions import ParamValidationError

    error = classify(ParamValidationError(report="Invalid bucket name"))
    assert not error.retryable


def test_credentials_or_a_bad_bucket_in_the_url_are_usage_errors_that_show_no_secret(afc):
    """Found by an outside audit: s3://KEY:SECRET@bucket reached botocore, whose validation
    error quoted the secret unscrubbed, retried as transient, exit 1."""
    from conftest import jobs, manifest

    afc.write_manifest(manifest(jobs(1)))
    for url, said in (
        ("s3://AKIAEXAMPLE:supersecretvalue123@bucket/x", "carries no credentials"),
        # a secret holding '/' (as AWS secrets often do) split the bucket off inside it
        ("s3://AKIAEXAMPLE:supersecret/value123@bucket/x", "carries no credentials"),
        ("s3://bad bucket!/x", "is not a bucket name"),
    ):
        for command in ("submit", "plan"):
            result = afc(command, "manifest.yaml", "--storage", url)
            assert result.returncode == 2, result.stderr
            assert said in result.stderr and "supersecret" not in result.stderr
            assert "Traceback" not in result.stderr and "regex" not in result.stderr
    assert not (afc.cwd / "afc.db").exists()
