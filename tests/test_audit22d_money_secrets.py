"""Outside audit 22 (d) of money and secrets: what a paid run records and says, and what it
must never say (an API key, a ledger's password), through the real ``afc`` command."""

from __future__ import annotations

import signal
import socket
import time

from conftest import jobs, ledger_count, manifest

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
        # exit 1: a server that does not answer (tests/test_audit28b_ledger_down.py)
        assert result.returncode == 1, result.stderr
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


def test_a_budget_passed_by_requests_a_killed_run_left_says_so(afc, fake, ledger_url):
    """A fal card of 0.025 an image charges exactly its estimate. A run killed while fal
    rendered three requests left them to the next run, which polled them to their end under
    ``--max-spend 0.03`` (README "Budget": a budget's counted spend can pass its cap by
    requests it adopted). Its summary said 'past its budget of 0.030000: answers cost more
    than the estimates reserved for them (a card that charges tokens: give it a per_image of
    at least what an image costs in tokens)', a cause that was not this run's and a fix for a
    card that has no token rate."""
    afc.env["AFC_LEDGER"] = ledger_url
    data = manifest(
        [{"key": f"j{i}", "prompt": f"hold {i}"} for i in range(3)],
        rates=[{"provider": "fal", "model": "fal-ai/flux/dev", "per_image": "0.025"}],
    )
    data["defaults"]["chain"] = [{"provider": "fal", "model": "fal-ai/flux/dev"}]
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml")
    sql = "SELECT COUNT(*) FROM attempts WHERE provider_request_id IS NOT NULL"
    deadline = time.time() + 60
    while ledger_count(afc, ledger_url, sql) < 3 and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    fake.released.set()
    result = afc("resume", "--max-spend", "0.03")
    assert (
        ledger_count(afc, ledger_url, "SELECT COUNT(*) FROM events WHERE kind = 'attempt_resumed'")
        == 3
    )
    assert fake.counts["fal_submit"] == 3, "polled, never paid again"
    assert "this run spent 0.075000 USD (priced)" in result.stderr, result.stderr
    said = "this run spent 0.075000 USD, past its budget of 0.030000: 0.075000 USD of it was requests an earlier run left rendering"
    assert said in result.stderr, result.stderr
    assert "answers cost more than the estimates" not in result.stderr, result.stderr
    assert "tokens" not in result.stderr, result.stderr
