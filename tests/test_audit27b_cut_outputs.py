"""Outside audit 27b: an output download whose body HTTP cannot tell from a whole one.

A CDN or proxy that says a ``Content-Length`` shorter than the body it sends (an image
optimiser that rewrote the body and kept the origin's length) ends the answer, for HTTP, at
that length: the rest comes after the answer has ended. A body without a length ends as its
connection does, so a connection closed early ends it too. Either way a piece of the paid
render was stored as the job's output, the job succeeded, and the render was lost with
nothing said. A body shorter than its ``Content-Length`` was caught already (a read error,
fetched again): checked here too.

An image or video of a format that says its own length (PNG, JPEG, WebP, ISO media) and
holds less is now not the output (``http.cut_short``): fetched again, as a 503 is, and the
paid attempt fails at its known cost when it stays so."""

from __future__ import annotations

import asyncio
import io

import pytest
from conftest import manifest
from test_audit_wire import (
    OPENAI_RATES,
    PNG,
    WireServer,
    adapter,
    answered,
    attempts,
    dalle,
    rendered,
)
from test_providers import FAST, MODELS, RATES

from afc_cli.providers.base import ProviderError
from afc_cli.providers.http import FETCH_TRIES, cut_short
from afc_cli.providers.local import render_png
from afc_cli.providers.openai import OpenAIProvider
from afc_cli.spool import Spilled


def test_a_replicate_output_sent_past_its_content_length_is_fetched_again_whole(afc, fake):
    """The fake's "cut-download" output: its first download says 20 bytes and sends the
    whole PNG after them. The job's output was those 20 bytes; now the second GET's whole
    PNG, the render paid once."""
    data = manifest([{"key": "shot", "prompt": "cut-download a lighthouse"}], rates=RATES)
    data["defaults"]["chain"] = [
        {"provider": "replicate", "model": MODELS["replicate"], "attempts": 1, "backoff": FAST}
    ]
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    (path,) = fake.cut_files
    assert (afc.outputs() / "b1" / "shot.png").read_bytes() == render_png(path, 32, 32)
    assert fake.counts["replicate_submit"] == 1
    assert fake.counts["download"] == 2
    (attempt,) = attempts(afc)
    assert attempt["status"] == "succeeded" and attempt["cost"] == "0.003840", attempt


def short_length(head: bytes, body: bytes):
    async def behaviour(_head, _body, writer) -> bool:
        writer.write(head + body[:20])
        await writer.drain()
        await asyncio.sleep(0.1)  # the rest after the answer, as HTTP reads it, has ended
        writer.write(body[20:])
        await writer.drain()
        return False

    return behaviour


def closed_early(body: bytes):
    async def behaviour(_head, _body, writer) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nConnection: close\r\n\r\n")
        writer.write(body[: len(body) // 2])
        await writer.drain()
        return False  # closed: for HTTP, a body without a length ends here

    return behaviour


def long_length(body: bytes):
    async def behaviour(_head, _body, writer) -> bool:
        writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {len(body) + 50}\r\n\r\n".encode())
        writer.write(body)
        await writer.drain()
        return False

    return behaviour


# Connection: close, so no try is sent on a connection the last one's rest came down
PNG_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 20\r\nConnection: close\r\n\r\n"
)


@pytest.mark.parametrize(
    "behaviour, said",
    [
        (short_length(PNG_HEAD, PNG), "a PNG cut short (20 bytes, no IEND chunk)"),
        (closed_early(PNG), "a PNG cut short"),
        (long_length(PNG), "connection failed (ReadError)"),
    ],
    ids=["length-short", "closed-early", "length-long"],
)
def test_a_cut_output_is_never_stored_and_its_attempt_keeps_its_cost(monkeypatch, behaviour, said):
    cdn = WireServer(behaviour)
    provider_server = WireServer(answered(dalle(f"{cdn.url}/out.png")))
    try:
        provider = adapter(monkeypatch, OpenAIProvider, "OPENAI_BASE_URL", provider_server.url)
        with pytest.raises(ProviderError) as caught:
            rendered(provider, "dall-e-3")
    finally:
        provider_server.stop()
        cdn.stop()
    failure = caught.value
    assert said in failure.message, failure.message
    assert failure.error_class == "unavailable", failure.message
    assert failure.cost_micros == 40_000 and failure.usage == {"images": 1}
    assert len(cdn.received) == FETCH_TRIES  # fetched again each time, free
    assert len(provider_server.received) == 1


def test_through_afc_a_cut_output_fails_its_attempt_at_its_cost(afc):
    """The same CDN, every answer cut, through the command (the window ends the fetches):
    the job fails, nothing stored, the attempt's cost 0.04 recorded."""
    cdn = WireServer(short_length(PNG_HEAD, PNG))
    provider = WireServer(answered(dalle(f"{cdn.url}/out.png")))
    try:
        data = manifest([{"key": "shot", "prompt": "a lighthouse"}], rates=OPENAI_RATES)
        data["defaults"]["chain"] = [
            {"provider": "openai", "model": "dall-e-3", "attempts": 1, "window_s": 3}
        ]
        afc.write_manifest(data)
        result = afc(
            "submit",
            "manifest.yaml",
            env={
                "OPENAI_API_KEY": "sk-test",
                "AFC_POLL_S": "0.05",
                "OPENAI_BASE_URL": f"{provider.url}/v1",
            },
        )
        assert result.returncode == 1, result.stderr
        assert len(provider.received) == 1
        (attempt,) = attempts(afc)
        assert attempt["status"] == "failed" and attempt["cost"] == "0.040000", attempt
        assert "a PNG cut short" in attempt["error"], attempt
        assert not (afc.outputs() / "b1" / "shot.png").exists()
    finally:
        provider.stop()
        cdn.stop()


# --- the formats' own lengths ---------------------------------------------------------------


def pillow(kind: str, **options) -> bytes:
    from PIL import Image

    image = Image.new("RGB", (64, 48), (200, 30, 90))
    for x in range(64):
        image.putpixel((x, x % 48), (x * 4, 255 - x * 4, 7))
    out = io.BytesIO()
    image.save(out, kind, **options)
    return out.getvalue()


def mp4() -> bytes:
    def box(kind: bytes, body: bytes) -> bytes:
        return (8 + len(body)).to_bytes(4, "big") + kind + body

    return (
        box(b"ftyp", b"isom" + bytes(4) + b"isomiso2mp41")
        + box(b"moov", box(b"mvhd", bytes(100)))
        + box(b"mdat", bytes(range(256)) * 40)
    )


WHOLE = {
    "png": PNG,
    "jpeg": pillow("JPEG", quality=90),
    "progressive jpeg": pillow("JPEG", progressive=True, exif=b"Exif\x00\x00" + bytes(64)),
    "webp": pillow("WEBP"),
    "mp4": mp4(),
}


@pytest.mark.parametrize("kind", sorted(WHOLE))
def test_a_whole_file_is_whole_and_each_cut_of_it_is_not(kind):
    data = WHOLE[kind]
    assert cut_short(data) is None
    if kind != "mp4":  # an ISO media file is boxes to its end: bytes after them are a box cut
        assert cut_short(data + b"trailing bytes after its end") is None
    for size in range(16, len(data) - 1, max(1, len(data) // 97)):
        assert cut_short(data[:size]) is not None, (kind, size, len(data))
    assert cut_short(data[:-1]) is not None


@pytest.mark.parametrize("kind", sorted(WHOLE))
def test_a_spilled_output_is_judged_from_its_file(tmp_path, kind):
    data = WHOLE[kind]
    for body, whole in ((data, True), (data[: len(data) * 2 // 3], False)):
        spilled = Spilled(tmp_path)
        spilled.write(body)
        try:
            assert (cut_short(spilled) is None) is whole
        finally:
            spilled.close()


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"plain text a model wrote",
        b"GIF89a" + bytes(40),
        b"\x89PNG\r\n\x1a\n" + bytes(4096),  # a signature and zeros (the fakes' big outputs)
        b"\xff\xd8\xff" + bytes(100),
        b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\x00abcd\x00\x00\x00\x00" * 600_000,  # tiny chunks
    ],
    ids=["empty", "text", "gif", "zeros", "jpeg-like", "many-chunks"],
)
def test_bytes_it_cannot_read_as_a_format_are_not_judged(data):
    assert cut_short(data) is None
