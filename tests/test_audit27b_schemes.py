"""Outside audit 27b: an output URL of a scheme afc does not fetch (``ftp://``, ``gopher://``).

aiohttp refuses such a URL before it connects (``NonHttpUrlClientError``), an error the
transport mapped as a read error after the request was sent: a free GET failing for a
moment, so the paid render's output was fetched again, in rounds, for as long as the
provider keeps its outputs (55 minutes for Replicate and DALL-E), the job and its slot held,
and its attempt then failed saying "connection failed (ReadError)". A ``file://`` URL (no
host) failed at once, as "the answer's output URL cannot be fetched"; so does this now, its
cost kept."""

from __future__ import annotations

import pytest
from test_audit_wire import WireServer, adapter, answered, dalle, rendered, reply

from afc_cli.providers.base import ProviderError
from afc_cli.providers.openai import OpenAIProvider


@pytest.mark.parametrize(
    "output", ["ftp://cdn.example.com/out.png", "gopher://cdn.example.com/out.png", "redirect"]
)
def test_an_output_url_of_another_scheme_fails_at_once_at_its_cost(monkeypatch, output):
    cdn = WireServer(answered(reply("302 Found", headers={"Location": "ftp://cdn.example/o.png"})))
    url = f"{cdn.url}/out.png" if output == "redirect" else output
    provider_server = WireServer(answered(dalle(url)))
    pauses: list[float] = []
    try:
        provider = adapter(monkeypatch, OpenAIProvider, "OPENAI_BASE_URL", provider_server.url)
        provider.keeps_outputs_s = 55 * 60.0  # DALL-E's: rounds for that long, were it passing

        async def pause(seconds: float) -> None:
            pauses.append(seconds)
            if len(pauses) > 50:
                raise AssertionError("fetched again and again")

        provider.sleep = pause
        with pytest.raises(ProviderError) as caught:
            rendered(provider, "dall-e-3")
    finally:
        provider_server.stop()
        cdn.stop()
    failure = caught.value
    assert failure.message == "openai: the answer's output URL cannot be fetched", failure.message
    assert failure.error_class == "server"
    assert failure.cost_micros == 40_000 and failure.usage == {"images": 1}
    assert pauses == []  # no try made again
    assert len(provider_server.received) == 1
