"""Outside audit 51a: S3 refusing a host whose clock is off is said so, not blamed on the
credentials."""

from __future__ import annotations

import time
from email.utils import formatdate

from test_s3_errors import STORAGE, client_error


def test_a_403_from_a_storage_whose_clock_is_far_from_this_hosts_names_the_clock():
    """S3 (and MinIO) refuse every request signed more than 15 minutes off their clock: a
    host whose clock was 20 minutes behind had the run refused before anything was rendered
    with 'cannot use s3://...: 403 Forbidden (check the credentials (AWS_ACCESS_KEY_ID /
    AWS_PROFILE) and that the bucket policy lets them list, read and write ...)': the bucket
    check is a HEAD, whose 403 names no code, and the user checked keys and policies that
    were right. The answer's Date says how far off this host is."""
    theirs = {"date": formatdate(time.time() + 20 * 60, usegmt=True)}  # this host behind
    head = STORAGE._error(client_error(403, "403", headers=theirs, op="HeadBucket"), "cannot use")
    assert not head.retryable
    assert "clock is 20 minutes behind the storage's" in head.message, head.message
    assert "NTP" in head.message and "bucket policy" not in head.message
    put = STORAGE._error(
        client_error(403, "RequestTimeTooSkewed", "The difference between the request time"),
        "cannot write",
        "b1/shot.png",
    )
    assert not put.retryable and "clock is off the storage's" in put.message, put.message
    # a refusal from a storage whose clock agrees with this host's is the credentials'
    now = {"date": formatdate(time.time(), usegmt=True)}
    denied = STORAGE._error(client_error(403, "403", headers=now, op="HeadBucket"), "cannot use")
    assert "bucket policy" in denied.message and "clock" not in denied.message
