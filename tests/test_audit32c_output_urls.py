"""Outside audit 32c: an output URL that httpx reads and aiohttp refuses is no bug in afc.

An output URL is the provider's to name (an OpenAI-compatible gateway's, a Replicate model's
own). One holding a user name or password (``https://user:pw@cdn/out.png``), a port past
65535, or a host name IDNA refuses (``xn--``), there or in a redirect, raised a ValueError
out of the transport (aiohttp refuses a URL with credentials beside the Authorization header
httpx made of them; yarl refuses the port; httpx raises IDNA's error as it is): 'afc could
not read the answer ... This is a bug in afc's openai adapter', and the whole run stopped,
the other jobs left queued, and again on each resume. A URL with credentials is fetched as
curl and httpx fetch it (Basic authorization); the others fail at once as any URL afc cannot
fetch does, at the render's known cost."""

from __future__ import annotations

import pytest
from test_audit_wire import (
    OPENAI_RATES,
    PNG,
    WireServer,
    adapter,
    answered,
    attempts,
    dalle,
    rendered,
    reply,
    run,
)

from afc_cli.providers.base import ProviderError
from afc_cli.providers.openai import OpenAIProvider


def test_an_output_url_with_credentials_is_fetched_and_the_run_goes_on(afc):
    store = WireServer(answered(reply("200 OK", PNG, {"Content-Type": "image/png"})))
    provider = WireServer(answered(dalle(f"http://cdn:Pw0rdOfTheCdn@localhost:{store.port}/o.png")))
    try:
        result = run(
            afc, "openai", "dall-e-3", OPENAI_RATES, {"OPENAI_BASE_URL": f"{provider.url}/v1"}
        )
        assert result.returncode == 0, result.stderr
        assert "bug" not in result.stderr and "Traceback" not in result.stderr
        assert (afc.outputs() / "b1" / "shot.png").read_bytes() == PNG
        ((head, _),) = store.received
        assert b"authorization: basic " in head.lower(), head  # as curl and httpx send it
        assert b"Pw0rdOfTheCdn" not in head
        (attempt,) = attempts(afc)
        assert attempt["status"] == "succeeded", attempt
    finally:
        provider.stop()
        store.stop()


@pytest.mark.parametrize(
    "output",
    ["http://127.0.0.1:99999/out.png", "http://xn--/out.png", "redirect-port", "redirect-idna"],
)
def test_an_output_url_afc_cannot_fetch_fails_at_once_at_its_cost(monkeypatch, output):
    where = {"redirect-port": "http://127.0.0.1:99999/o.png", "redirect-idna": "http://xn--/o"}
    cdn = WireServer(answered(reply("302 Found", headers={"Location": where.get(output, "/")})))
    url = f"{cdn.url}/out.png" if output.startswith("redirect") else output
    provider_server = WireServer(answered(dalle(url)))
    try:
        provider = adapter(monkeypatch, OpenAIProvider, "OPENAI_BASE_URL", provider_server.url)
        with pytest.raises(ProviderError) as caught:
            rendered(provider, "dall-e-3")
    finally:
        provider_server.stop()
        cdn.stop()
    failure = caught.value
    assert failure.message == "openai: the answer's output URL cannot be fetched", failure.message
    assert failure.error_class == "server"
    assert failure.cost_micros == 40_000 and failure.usage == {"images": 1}
    assert len(provider_server.received) == 1
