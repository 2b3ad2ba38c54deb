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
    assert "stream is cut short" in failure.message, failure.message
    assert failure.cost_micros == 40_000 and failure.usage == {"images": 1}
    assert len(cdn.received) == FETCH_TRIES


def test_a_whole_gzip_stream_is_the_output(monkeypatch):
    cdn = cdn_of(ENCODED)
    try:
        result = fetch(monkeypatch, cdn)
    finally:
        cdn.stop()
    assert result.data == MODEL


# --- a gzip stream of several members ---------------------------------------------------------
# RFC 1952: a gzip file is a series of members (files concatenated, pigz's, a store's object
# written in parts). httpx's decoder reads the first and passes the rest over as it would
# bytes after the stream: the output was stored as its first member's piece, the job
# succeeded. Every member is read now; bytes after the last that start no member are still
# passed over, as before.


@pytest.mark.parametrize("after", [b"", b"\0\0\0\0", b"\n"])
def test_every_member_of_a_gzip_output_is_stored(monkeypatch, after):
    cdn = cdn_of(gzip.compress(MODEL[:5000]) + gzip.compress(MODEL[5000:]) + after)
    try:
        result = fetch(monkeypatch, cdn)
    finally:
        cdn.stop()
    assert result.data == MODEL


def test_members_are_read_however_the_reads_cut_them():
    from afc_cli.providers.transport import GzipMembers

    encoded = gzip.compress(MODEL[:7]) + gzip.compress(MODEL[7:9000]) + gzip.compress(b"")
    encoded += gzip.compress(MODEL[9000:])
    for size in (1, 2, 3, 7, 4096):
        decoder = GzipMembers()
        pieces = [decoder.decode(encoded[i : i + size]) for i in range(0, len(encoded), size)]
        assert b"".join(pieces) + decoder.flush() == MODEL, size
        assert decoder.decompressor.eof
