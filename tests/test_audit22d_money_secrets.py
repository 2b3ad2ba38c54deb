"""Outside audit 22 (d) of money and secrets: what a paid run records and says, and what it
must never say (an API key, a ledger's password), through the real ``afc`` command."""

from __future__ import annotations

import socket

from conftest import jobs, manifest

PASSWORD = "Sup3rS3cretPW-0123"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_ledger_url_with_a_password_and_no_user_name_is_shown_masked(afc, pg_url):
    """``postgresql://:PASSWORD@host/db`` (no user name: libpq takes the password and the
    user from PGUSER or the login) is a URL libpq reads, but the masks of a URL's credentials
    wanted a user name before the colon: 'cannot connect to the ledger
    postgresql://:Sup3rS3cretPW-0123@127.0.0.1:1/db' on stderr (and in ``--json`` runs'
    stderr), and 'no job with key ... in postgresql://:PASSWORD@...' once connected."""
    down = f"postgresql://:{PASSWORD}@127.0.0.1:{_closed_port()}/db"
    for args in (("status",), ("status", "--json"), ("costs", "report")):
        result = afc(*args, "--ledger", down)
        assert result.returncode == 2, result.stderr
        assert "cannot connect to the ledger postgresql://" in result.stderr, result.stderr
        assert PASSWORD not in result.stderr + result.stdout, result.stderr
        assert "Sup3r" not in result.stderr

    # a live server (it trusts loopback, so any password connects; the user from PGUSER)
    url = pg_url.replace("postgresql://afc@", f"postgresql://:{PASSWORD}@")
    afc.env.update(AFC_LEDGER=url, PGUSER="afc")
    afc.write_manifest(manifest(jobs(1)))
    submitted = afc("submit", "manifest.yaml")
    assert submitted.returncode == 0, submitted.stderr
    shown = afc("show", "no-such-key")
    assert shown.returncode == 2 and "no job with key 'no-such-key'" in shown.stderr
    assert "postgresql://<redacted>@127.0.0.1" in shown.stderr, shown.stderr
    for said in (submitted.stderr, submitted.stdout, shown.stderr):
        assert PASSWORD not in said and "Sup3r" not in said


def test_an_s3_endpoint_with_a_password_and_no_user_name_is_shown_masked(afc):
    """The same mask in any message: botocore's 'Could not connect to the endpoint URL:
    "http://:PASSWORD@127.0.0.1:1/bucket"' (AWS_ENDPOINT_URL_S3 with credentials in it, a
    password and no user name) was shown as it is."""
    afc.write_manifest(manifest(jobs(1)))
    env = {
        "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "an-example-secret-access-key",
        "AWS_ENDPOINT_URL_S3": f"http://:{PASSWORD}@127.0.0.1:{_closed_port()}",
    }
    result = afc("submit", "manifest.yaml", "--storage", "s3://bkt/x", env=env)
    assert result.returncode != 0
    assert "http://<redacted>@127.0.0.1" in result.stderr, result.stderr
    assert PASSWORD not in result.stderr + result.stdout and "Sup3r" not in result.stderr
