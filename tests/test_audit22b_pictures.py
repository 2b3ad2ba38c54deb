"""Outside audit 22 (b) of the pictures: ``afc serve`` as a user meets it, over plain HTTP."""

from __future__ import annotations

from urllib.parse import quote

import httpx
import pytest
from browser import Served
from conftest import jobs, manifest

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")


def test_a_base64_token_pasted_into_the_address_is_taken_as_it_is(afc):
    """AFC_SERVE_TOKEN made by ``openssl rand -base64 24`` holds a '+' two times in five. The
    page asks to open the address with the query parameter token set to the value, and that
    address, pasted as it is (``?token=q3+Zr/...``), was a 401 saying to do just that: the
    query was read as a form, its '+' a space. Only the token percent-encoded got in."""
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    token = "q3+Zr/8kT0+pL9wXyA1bC2dE=="
    served = Served(afc, env={"AFC_SERVE_TOKEN": token})
    try:
        for sent in (token, quote(token, safe="")):
            with httpx.Client() as client:
                first = client.get(f"{served.url}review?token={sent}&page=1")
                assert first.status_code == 303, (sent, first.text)
                assert "token" not in first.headers["location"]
                assert first.headers["location"].endswith("/review?page=1")
                assert client.get(first.headers["location"]).status_code == 200  # the cookie
        # a '+' sent is the token's plus (or a form's space); a space sent as such is not
        # a plus, nor is anything else
        for wrong in (token.replace("+", " "), token.replace("+", "-"), token[:-1]):
            answer = httpx.get(f"{served.url}?token={quote(wrong, safe='')}")
            assert answer.status_code == 401, wrong
    finally:
        code, stderr = served.stop()
    assert code == 0 and token not in stderr and "Traceback" not in stderr
