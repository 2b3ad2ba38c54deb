"""Outside audit 25 (b): an output URL on this host, from a provider reached through a proxy
on the studio's network. In-process adapters against tests/test_audit_wire.py's raw sockets,
as tests/test_audit17_hostile.py's address tests do."""

from __future__ import annotations

import socket

import pytest
from test_audit17_hostile import _names, reply_png
from test_audit_wire import WireServer, adapter, answered, dalle, rendered

from afc_cli.providers.base import ProviderError
from afc_cli.providers.openai import OpenAIProvider

LAN = "10.20.30.40"  # the proxy's address as this host's resolver gives it


@pytest.fixture
def lan_proxy(monkeypatch):
    """``proxy.lan.test`` is on the private network for the base URL's lookup
    (``HttpProvider._output_rule``), and reaches the test's server on 127.0.0.1 when
    connected to."""
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        if host == "proxy.lan.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (LAN, 0))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    _names(monkeypatch, {"proxy.lan.test": "127.0.0.1"})
    return monkeypatch


@pytest.mark.parametrize(
    "where",
    ["http://127.0.0.1:{port}/out.png", "http://localhost:{port}/out.png", "http://[::1]:{port}/"],
)
def test_an_output_on_this_host_from_a_provider_behind_a_lan_proxy_is_never_fetched(
    lan_proxy, where
):
    """A base URL on the private network (a proxy in front of the provider) let its outputs
    be on private addresses, and so on this host's loopback too: a Replicate model's output
    URL naming http://127.0.0.1:2375/containers/json (a Docker API on the machine running
    afc) was fetched and stored as the job's output. A proxy on the network is not on this
    host: its outputs may be on the network, not here."""
    cdn = WireServer(answered(reply_png()))
    api = WireServer(answered(dalle(where.format(port=cdn.port))))
    try:
        provider = adapter(
            lan_proxy, OpenAIProvider, "OPENAI_BASE_URL", f"http://proxy.lan.test:{api.port}"
        )
        with pytest.raises(ProviderError) as caught:
            rendered(provider, "dall-e-3")
    finally:
        api.stop()
        cdn.stop()
    assert len(api.received) == 1 and cdn.received == []
    assert "never from this host" in caught.value.message, caught.value.message
    assert caught.value.error_class == "server" and caught.value.cost_micros == 40_000


def test_an_output_on_the_network_of_a_provider_behind_a_lan_proxy_is_still_fetched(lan_proxy):
    """The same proxy's outputs on the private network stay fetchable (127.0.0.1 stands for
    an address there: the test's servers all listen on it)."""
    from afc_cli.providers import transport

    real = transport.not_this_host
    lan_proxy.setattr(transport, "not_this_host", lambda a: a == "127.0.0.1" or real(a))
    cdn = WireServer(answered(reply_png()))
    api = WireServer(answered(dalle(f"http://127.0.0.1:{cdn.port}/out.png")))
    try:
        provider = adapter(
            lan_proxy, OpenAIProvider, "OPENAI_BASE_URL", f"http://proxy.lan.test:{api.port}"
        )
        assert rendered(provider, "dall-e-3").data.startswith(b"\x89PNG")
        assert len(cdn.received) == 1
    finally:
        api.stop()
        cdn.stop()
