"""Outside audit 27a: the cookie ``afc serve`` sets for its token, as a neighbour on another
port of the same host receives it."""

from __future__ import annotations

import httpx
import pytest
from browser import Served
from conftest import jobs, manifest

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")


def test_the_cookie_holds_no_token_and_is_good_for_its_own_server_only(afc):
    """The cookie held AFC_SERVE_TOKEN itself, and a browser sends a host's cookies to every
    port of it: any other web app of the machine the reviewer opened (a notebook, a dev
    server logging its requests' headers) received the secret, which opens every afc serve
    started with it (the team's shared value, a server on 0.0.0.0). The cookie now holds a
    value derived from the token and the server's port (HMAC-SHA-256): the token is in no
    cookie, and a cookie of one server opens no other, even one with the same token."""
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    token = "shared-team-secret-" + "z" * 16
    servers = [Served(afc, env={"AFC_SERVE_TOKEN": token}) for _ in range(2)]
    try:
        first, second = servers
        with httpx.Client() as client:
            opened = client.get(f"{first.url}review?token={token}")
            assert opened.status_code == 303
            set_cookie = opened.headers["set-cookie"]
            assert token not in set_cookie
            [(name, value)] = client.cookies.items()
            assert value and token not in value
            assert client.get(first.url + "review").status_code == 200  # it opens its server
        # the value sent to the other server (as a browser would send it to every port), under
        # the other's cookie name: no entry
        port = httpx.URL(second.url).port
        other_name = name.rsplit("_", 1)[0] + f"_{port}"
        answer = httpx.get(second.url + "review", cookies={other_name: value})
        assert answer.status_code == 401
        # the raw token in the cookie is no entry either: only ?token= takes it
        first_port = httpx.URL(first.url).port
        raw = httpx.get(first.url + "review", cookies={name: token})
        assert name.endswith(f"_{first_port}") and raw.status_code == 401
    finally:
        stopped = [served.stop() for served in servers]
    for code, stderr in stopped:
        assert code == 0 and token not in stderr
