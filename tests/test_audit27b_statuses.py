"""Outside audit 27b: the success statuses of an output URL's GET, other than 200.

A download took 200 for the output and every other status for the download's definite
failure: a 203 (Non-Authoritative Information: a transforming proxy's 200, its body the
output) failed the paid attempt at once, and the next attempt paid again for an output that
had come; a 206 (a part of it: afc asks for the whole), a 204 (no body) or a 202 (not there
yet) failed it at once too, where a 200 carrying no output (an empty body, a proxy's page) is
fetched again (``http.not_an_output``) as a 503 is, until the provider no longer keeps it."""

from __future__ import annotations

import pytest
from fakeproviders import KEYS
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
from afc_cli.providers.http import FETCH_TRIES
from afc_cli.providers.openai import OpenAIProvider


def test_a_203_from_a_transforming_proxy_is_the_output(afc):
    cdn = WireServer(
        answered(reply("203 Non-Authoritative Information", PNG, {"Content-Type": "image/png"}))
    )
    provider = WireServer(answered(dalle(f"{cdn.url}/out.png")))
    try:
        result = run(
            afc, "openai", "dall-e-3", OPENAI_RATES, {"OPENAI_BASE_URL": f"{provider.url}/v1"}
        )
        assert result.returncode == 0, result.stderr
        assert (afc.outputs() / "b1" / "shot.png").read_bytes() == PNG
        (attempt,) = attempts(afc)
        assert attempt["status"] == "succeeded" and attempt["cost"] == "0.040000", attempt
        assert len(provider.received) == 1 and len(cdn.received) == 1
    finally:
        provider.stop()
        cdn.stop()


@pytest.mark.parametrize(
    "status, body, headers, said",
    [
        ("206 Partial Content", PNG[:20], {"Content-Range": f"bytes 0-19/{len(PNG)}"}, "a part"),
        ("204 No Content", b"", {}, "no body"),
        ("202 Accepted", b"", {}, "no output yet"),
    ],
)
def test_another_2xx_is_fetched_again_and_never_stored(monkeypatch, status, body, headers, said):
    """The paid render's output is asked for again (a round of FETCH_TRIES here, where the
    provider's keeping it gives later rounds), and the attempt fails at its known cost."""
    cdn = WireServer(answered(reply(status, body, {"Content-Type": "image/png", **headers})))
    provider_server = WireServer(answered(dalle(f"{cdn.url}/out.png")))
    try:
        provider = adapter(monkeypatch, OpenAIProvider, "OPENAI_BASE_URL", provider_server.url)
        with pytest.raises(ProviderError) as caught:
            rendered(provider, "dall-e-3")
    finally:
        provider_server.stop()
        cdn.stop()
    failure = caught.value
    assert failure.error_class == "unavailable", failure.message
    assert f"answered HTTP {status.split()[0]} with {said}" in failure.message, failure.message
    assert failure.cost_micros == 40_000 and failure.usage == {"images": 1}
    assert len(cdn.received) == FETCH_TRIES
    assert len(provider_server.received) == 1
    assert KEYS["OPENAI_API_KEY"].encode() not in b"".join(h for h, _ in cdn.received)
