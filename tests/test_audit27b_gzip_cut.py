"""Outside audit 27b: a gzip-encoded output whose gzip stream is cut short.

httpx's decoder hands back what a gzip stream decoded to so far when the body ends, and says
nothing of a stream that never reached its end: a body cut within it (a CDN that cached the
compressed object as far as its origin sent it, with that length, or a body without a length
whose connection closed early) was decoded to a piece of the output, stored as the job's
output, and the job succeeded. It is a body that does not decode (``AnswerUndecodable``, a
read error): fetched again, as a cut body is, and the paid attempt fails at its known cost
when it stays so. A model's output of a format afc does not judge (``http.cut_short``), here
a glTF model, is caught so too."""

from __future__ import annotations

import gzip

import pytest
from test_audit_wire import WireServer, adapter, answered, dalle, rendered, reply

from afc_cli.providers.base import ProviderError
from afc_cli.providers.http import FETCH_TRIES
from afc_cli.providers.openai import OpenAIProvider

MODEL = b"glTF\x02\x00\x00\x00" + bytes(range(256)) * 64
ENCODED = gzip.compress(MODEL)


def cdn_of(body: bytes, coding: str = "gzip") -> WireServer:
    return WireServer(
        answered(
            reply(
                "200 OK",
                body,
                {"Content-Type": "model/gltf-binary", "Content-Encoding": coding},
            )
        )
    )


def fetch(monkeypatch, cdn: WireServer):
    provider_server = WireServer(answered(dalle(f"{cdn.url}/model.glb")))
    try:
        provider = adapter(monkeypatch, OpenAIProvider, "OPENAI_BASE_URL", provider_server.url)
        return rendered(provider, "dall-e-3")
    finally:
        provider_server.stop()


@pytest.mark.parametrize("coding", ["gzip", "identity, gzip"])
def test_a_gzip_stream_cut_short_is_never_stored(monkeypatch, coding):
    cdn = cdn_of(ENCODED[: len(ENCODED) // 2], coding)
    try:
        with pytest.raises(ProviderError) as caught:
            fetch(monkeypatch, cdn)
    finally:
        cdn.stop()
    failure = caught.value
    assert failure.error_class == "unavailable", failure.message
    assert "AnswerUndecodable" in failure.message, failure.message
    assert failure.cost_micros == 40_000 and failure.usage == {"images": 1}
    assert len(cdn.received) == FETCH_TRIES


def test_a_whole_gzip_stream_is_the_output(monkeypatch):
    cdn = cdn_of(ENCODED)
    try:
        result = fetch(monkeypatch, cdn)
    finally:
        cdn.stop()
    assert result.data == MODEL
