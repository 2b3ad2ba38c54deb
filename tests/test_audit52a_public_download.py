"""An output of a provider on a public address, at a CDN named by its host name (as every
real one is: replicate.delivery, fal.media, DALL-E's blob store): fetched through the
public-only pool, its name resolved by ``transport._PublicResolver``, which keeps the public
addresses. That is every real download's path, and no test executed its success (outside
audit 52a measured the transport's coverage): the suite's servers are on 127.0.0.1, reached
by address (never resolved) or refused as not public. In-process against
tests/test_audit_wire.py's raw sockets, as tests/test_audit17_hostile.py's address tests are;
127.0.0.1 stands for a public address here."""

from __future__ import annotations

from test_audit17_hostile import _names, reply_png
from test_audit_wire import WireServer, adapter, answered, dalle, rendered

from afc_cli.providers.openai import OpenAIProvider


def test_an_output_at_a_public_cdn_named_by_its_host_is_fetched(monkeypatch):
    """Would catch the public-only resolver refusing (or losing) the public addresses it
    keeps: every paid render's output of a real provider then failed at its download, and
    each next attempt paid for another."""
    from afc_cli.providers import transport

    real_public = transport.public_address
    monkeypatch.setattr(transport, "public_address", lambda a: a == "127.0.0.1" or real_public(a))
    cdn = WireServer(answered(reply_png()))
    api = WireServer(answered(dalle(f"http://cdn.public.test:{cdn.port}/out.png")))
    _names(monkeypatch, {"api.wire.test": "127.0.0.1", "cdn.public.test": "127.0.0.1"})
    try:
        provider = adapter(
            monkeypatch, OpenAIProvider, "OPENAI_BASE_URL", f"http://api.wire.test:{api.port}"
        )
        result = rendered(provider, "dall-e-3")
        assert result.data.startswith(b"\x89PNG")
        assert result.cost_micros == 40_000
        assert len(cdn.received) == 1 and len(api.received) == 1
    finally:
        api.stop()
        cdn.stop()


def test_a_base_url_whose_name_does_not_resolve_is_public_for_now_and_looked_up_again(
    monkeypatch,
):
    """A base URL whose host name does not resolve at an output's download (a proxy's name in a
    DNS outage; ``.invalid`` never resolves) is taken as public for that download, and not
    remembered: its next output looks it up again. One that resolves is remembered. Would
    catch the failed lookup remembered for the run: a proxy on the studio's network whose
    name failed once had every later output (on its network) refused, each paid render lost
    and the next attempt paying again."""
    import asyncio

    from afc_cli.providers.transport import NOT_THIS_HOST

    monkeypatch.setenv("OPENAI_BASE_URL", "http://api.afc-test.invalid/v1")
    provider = OpenAIProvider()
    assert asyncio.run(provider._output_rule()) is True
    assert provider._private_bases == {}, "a lookup that failed was remembered"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://10.1.2.3/v1")  # a proxy on the network
    assert asyncio.run(provider._output_rule()) == NOT_THIS_HOST
    assert provider._private_bases == {"http://10.1.2.3/v1": NOT_THIS_HOST}
