"""Outside audit 31c: a URL's query parameter named as a secret is masked, as README's
'?key=-style query parameters' says: an Azure Function's key (?code=), which its webhook URLs
carry, and names shaped as the secret variables are (api-key, auth_token, client_secret)
were shown whole in 'afc webhooks list', its --json and 'afc show --json'."""

from __future__ import annotations

import pytest
from conftest import manifest

from afc_cli.secrets import scrub

FUNCTION_KEY = "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (f"https://fn.azurewebsites.net/api/afc?code={FUNCTION_KEY}==", "?code=<redacted>"),
        ("https://x/h?api-key=abcdef123456&page=2", "?api-key=<redacted>&page=2"),
        ("https://x/h?a=1&auth_token=abcdef123456", "&auth_token=<redacted>"),
        ("https://x/h?client_secret=abcdef123456", "?client_secret=<redacted>"),
        ("https://x/h?X-API-KEY=abcdef123456", "?X-API-KEY=<redacted>"),
    ],
)
def test_a_secret_named_query_parameter_is_masked(text, shown):
    assert shown in scrub(text), scrub(text)
    assert "abcdef123456" not in scrub(text) and FUNCTION_KEY not in scrub(text)


def test_ordinary_query_parameters_are_kept():
    text = "https://x/h?page=2&monkey=banana&codec=png"
    assert scrub(text) == text


def test_an_azure_function_s_key_in_a_webhook_url_is_shown_nowhere(afc):
    data = manifest([{"key": "a", "prompt": "p"}])
    url = f"http://127.0.0.1:9/api/afc?code={FUNCTION_KEY}=="
    data["webhook"] = {"url": url, "secret_env": "H"}
    afc.write_manifest(data)
    env = {"H": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
    result = afc("submit", "manifest.yaml", "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert FUNCTION_KEY not in result.stdout + result.stderr
    for args in (("webhooks", "list"), ("webhooks", "list", "--json"), ("show", "a", "--json")):
        shown = afc(*args, env=env)
        assert shown.returncode == 0, shown.stderr
        assert FUNCTION_KEY not in shown.stdout + shown.stderr, shown.stdout
        assert "/api/afc?code=<redacted>" in shown.stdout, shown.stdout
