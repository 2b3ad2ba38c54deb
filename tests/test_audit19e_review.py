"""Nineteenth session, review of the changes since 83891ea: the environment's proxy on the
provider transport, and 'afc resume' passing by the dependents of a person's decision."""

from __future__ import annotations

import pytest
from test_audit_wire import OPENAI_RATES, WireServer, attempts, reply, run


def refusing(status: str):
    async def behaviour(head, body, writer) -> bool:
        writer.write(reply(status, b"denied", {"Proxy-Authenticate": 'Basic realm="studio"'}))
        await writer.drain()
        return False

    return behaviour


@pytest.mark.parametrize("status", ["407 Proxy Authentication Required", "502 Bad Gateway"])
def test_a_proxy_refusing_the_tunnel_costs_nothing_and_says_so(afc, status):
    """A provider on https is reached through the proxy's tunnel (``CONNECT``). A proxy that
    refuses it (credentials missing, a host not on its list, one it cannot reach) made no
    connection to the provider, yet each paid call was recorded at a cost unknown (aiohttp's
    ``ClientHttpProxyError`` taken as a read after the request was sent), 'connection
    failed (ReadError)', naming no proxy. It is a request never sent, at 0, with what the
    proxy answered."""
    proxy = WireServer(refusing(status))
    try:
        env = {"OPENAI_BASE_URL": "https://api.openai.invalid/v1", "HTTPS_PROXY": proxy.url}
        result = run(afc, "openai", "dall-e-3", OPENAI_RATES, env)
        assert result.returncode == 1, result.stderr
        assert [head.split(b" ")[:2] for head, _ in proxy.received] == [
            [b"CONNECT", b"api.openai.invalid:443"]
        ]
        (attempt,) = attempts(afc)
        assert (attempt["cost"], attempt["cost_source"]) == ("0.000000", "unsent"), attempt
        assert f"the proxy answered {status} to CONNECT" in attempt["error"], attempt
        assert "the request was never sent" in attempt["error"], attempt
        assert "unknown cost" not in result.stderr, result.stderr
    finally:
        proxy.stop()
