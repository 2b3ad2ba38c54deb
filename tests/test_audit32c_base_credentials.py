"""Outside audit 32c: a provider base URL holding credentials is refused before anything."""

from __future__ import annotations

import pytest
from conftest import manifest

PASSWORD = "Hunter2SecretPw"


@pytest.mark.parametrize("userinfo", [f"gw:{PASSWORD}@", "gw@", f":{PASSWORD}@"])
@pytest.mark.parametrize("command", ["submit", "resume"])
def test_a_base_url_with_credentials_is_refused_before_anything_is_paid(
    afc, fake, userinfo, command
):
    """README: a base URL no request can go to is refused with the keys, exit 2, before any
    job starts. One holding a user name or password (OPENAI_BASE_URL=https://gw:pw@gateway/v1,
    a gateway behind Basic authentication) was taken: httpx makes a URL's credentials the
    Authorization header, where the API key goes, and aiohttp refused the two at once, so
    each paid call failed inside the client after its attempt row was written: 'openai's
    answer could not be read (ValueError: Cannot combine AUTHORIZATION header ...) ... a bug
    in afc's openai adapter', the attempt recorded at a cost unknown though nothing was sent,
    the run stopped, and again at every resume. It is refused as the others are, the URL not
    shown (it holds the password)."""
    afc.write_manifest(
        manifest(
            [{"key": "a", "prompt": "p"}],
            defaults={"chain": [{"provider": "openai", "model": "gpt-image-1", "attempts": 1}]},
            rates=[{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}],
        )
    )
    base = afc.env["OPENAI_BASE_URL"]
    env = {"OPENAI_BASE_URL": base.replace("://", "://" + userinfo, 1)}
    if command == "resume":
        assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
        result = afc("resume", env=env)
    else:
        result = afc("submit", "manifest.yaml", env=env)
    assert result.returncode == 2, result.stderr
    assert "provider base URL cannot be used: OPENAI_BASE_URL holds a user name" in result.stderr
    assert PASSWORD not in result.stderr and "Traceback" not in result.stderr
    assert sum(fake.counts.values()) == 0
    if command == "submit":
        assert not (afc.cwd / "afc.db").exists()
    else:
        assert afc.rows("SELECT COUNT(*) FROM attempts") == [(0,)]
    plan = afc("plan", "manifest.yaml", env=env)
    assert "would be refused (exit 2): provider base URL cannot be used" in plan.stdout
