"""Outside audit 46 (c): a proxy variable set to what is no URL (a bracket missing, a port past
65535, no scheme nor host: ``HTTPS_PROXY=http://[::1``, ``http://proxy.corp:80800``,
``:3128``). The provider calls' check before a run raised yarl's ValueError: 'unexpected error
... (a bug in afc)', exit 1, naming no variable. A run with a webhook ended after its paid
renders the same way (httpx's InvalidURL), its summary unprinted. Now the first is refused
before anything is written, exit 2, naming the variable (never its value: a proxy's URL may
hold its password), and the second is a delivery that failed, said in its row."""

from __future__ import annotations

import base64
import os

import pytest
from conftest import manifest
from fakeproviders import KEYS

NO_PROXY = {"NO_PROXY": "", "no_proxy": ""}


@pytest.mark.parametrize(
    ("proxy", "said"),
    [
        ("http://user:pw@[::1", "Invalid IPv6 URL"),
        ("http://proxy.corp:80800", "Port out of range"),
        (":3128", "host is required"),
        ("http://", "no host"),
    ],
)
def test_a_malformed_https_proxy_is_refused_before_the_run(afc, proxy, said):
    data = manifest([{"key": "shot", "prompt": "a lighthouse"}])
    data["defaults"]["chain"] = [{"provider": "openai", "model": "dall-e-3", "attempts": 1}]
    data["rates"] = [{"provider": "openai", "model": "dall-e-3", "per_image": "0.04"}]
    afc.write_manifest(data)
    env = {
        **KEYS,
        **NO_PROXY,
        "OPENAI_BASE_URL": "https://api.openai.example/v1",
        "HTTPS_PROXY": proxy,
    }
    result = afc("submit", "manifest.yaml", env=env)
    assert result.returncode == 2, result.stderr
    assert "unexpected error" not in result.stderr and "a bug in afc" not in result.stderr
    assert "HTTPS_PROXY is set to no proxy URL afc can reach" in result.stderr, result.stderr
    assert said in result.stderr, result.stderr
    assert "pw" not in result.stderr.replace("Port", "")  # the value is never shown
    assert not (afc.cwd / "afc.db").exists()  # nothing written


def test_a_malformed_http_proxy_fails_a_delivery_not_the_run(afc):
    data = manifest(
        [{"key": "shot", "prompt": "a lighthouse"}],
        webhook={"url": "http://127.0.0.1:9/hook", "secret_env": "HOOK_SIGNING"},
    )
    afc.write_manifest(data)
    secret = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    env = {**NO_PROXY, "HOOK_SIGNING": secret, "HTTP_PROXY": "http://[::1"}
    result = afc("submit", "manifest.yaml", env=env)
    assert result.returncode == 0, result.stderr
    assert "unexpected error" not in result.stderr, result.stderr
    assert "1 succeeded" in result.stderr, result.stderr  # the summary is printed
    [row] = afc.json("webhooks", "list", env=env)["deliveries"]
    assert row["status"] == "pending", row
    assert "HTTP_PROXY names a proxy webhooks cannot go through" in row["last_error"], row
