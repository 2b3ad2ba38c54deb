"""Outside audit 31c: a URL's password holding an '@' not percent-encoded is masked whole.
HTTP clients (httpx, aiohttp, urllib) split a URL's credentials from its host at the last '@'
of its authority, so 'https://hook:p@ss@host/x' reaches host with the password 'p@ss'; afc's
mask stopped at the first '@' and showed the rest of the password: 'https://<redacted>@ss@host/x'
in 'afc webhooks list', its --json and every message naming the URL."""

from __future__ import annotations

import pytest
from conftest import manifest

from afc_cli.secrets import scrub

PASSWORD_TAIL = "ssWordSecret9"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("https://hook:p@ssWordSecret9@127.0.0.1:9/x", "https://<redacted>@127.0.0.1:9/x"),
        ("http://u:a@b@c@proxy:3128 refused", "http://<redacted>@proxy:3128 refused"),
        ("https://:p@ssWordSecret9@host/x", "https://<redacted>@host/x"),
        # an '@' after the authority (its path, a mail address further on) is not userinfo
        (
            "https://a:b@host/x/y@z and me@example.com",
            "https://<redacted>@host/x/y@z and me@example.com",
        ),
        ("https://a:b@host?q=me@x", "https://<redacted>@host?q=me@x"),
        (
            "see https://a:secretpw1@host mail me@example.com",
            "see https://<redacted>@host mail me@example.com",
        ),
    ],
)
def test_a_url_password_with_an_at_sign_is_masked_whole(text, shown):
    assert scrub(text) == shown


def test_a_webhook_url_s_password_is_shown_nowhere(afc):
    data = manifest([{"key": "a", "prompt": "p"}])
    data["webhook"] = {"url": f"https://hook:p@{PASSWORD_TAIL}@127.0.0.1:9/x", "secret_env": "H"}
    afc.write_manifest(data)
    env = {"H": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
    result = afc("submit", "manifest.yaml", "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert PASSWORD_TAIL not in result.stdout + result.stderr
    for args in (("webhooks", "list"), ("webhooks", "list", "--json"), ("show", "a", "--json")):
        shown = afc(*args, env=env)
        assert shown.returncode == 0, shown.stderr
        assert PASSWORD_TAIL not in shown.stdout + shown.stderr, shown.stdout
        assert "<redacted>@127.0.0.1:9/x" in shown.stdout, shown.stdout
