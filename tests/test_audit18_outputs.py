"""What is stored as a job's output, and what leaves the machine, found by an outside audit:
an output URL's answer that is no output is never stored as one, and a download's answer is
bounded in memory by its decoded bytes."""

from __future__ import annotations

import pytest
from conftest import manifest
from fakeproviders import KEYS
from test_audit_wire import (
    FAL_RESULT,
    OPENAI_RATES,
    PNG,
    WireServer,
    adapter,
    answered,
    attempts,
    dalle,
    json_reply,
    rendered,
    reply,
    run,
)

from afc_cli.providers.base import ProviderError
from afc_cli.providers.http import FETCH_TRIES
from afc_cli.providers.openai import OpenAIProvider

FAL_RATES = [{"provider": "fal", "model": "fal-ai/flux/dev", "per_image": "0.025"}]
LOGIN = b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head><body>Wi-Fi login</body></html>"


def pages_then_png(pages: list[bytes], ctype: str = "text/html; charset=utf-8"):
    """A CDN that answers each of ``pages`` with 200 (an HTML page, or an empty body; served
    as ``ctype``), in turn, then the PNG."""
    left = list(pages)

    async def behaviour(head, body, writer) -> bool:
        if left:
            page = left.pop(0)
            writer.write(reply("200 OK", page, {"Content-Type": ctype}))
        else:
            writer.write(reply("200 OK", PNG, {"Content-Type": "image/png"}))
        await writer.drain()
        return True

    return behaviour


S3_ERROR = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
    b"<Message>Request has expired</Message></Error>"
)


@pytest.mark.parametrize(
    "pages, ctype",
    [
        ([LOGIN, b""], "text/html; charset=utf-8"),
        # an object store's error document answered 200 (tests/test_output_error_documents.py)
        ([S3_ERROR, S3_ERROR], "application/xml"),
    ],
)
def test_an_html_page_answered_200_for_an_output_is_fetched_again_not_stored(afc, pages, ctype):
    """A captive portal (or a CDN's error page) answering an output's download with 200 and
    its login page: the page was stored as the job's image and the job succeeded, the paid
    render lost with nothing said. A page (or an empty body, or an error document) is a try
    that failed for a moment, as a 503 is: the output is fetched again, stored once it comes,
    and the render is paid once."""
    cdn = WireServer(pages_then_png(pages, ctype))
    provider = WireServer(answered(dalle(f"{cdn.url}/out.png")))
    try:
        result = run(
            afc, "openai", "dall-e-3", OPENAI_RATES, {"OPENAI_BASE_URL": f"{provider.url}/v1"}
        )
        assert result.returncode == 0, result.stderr
        assert (afc.outputs() / "b1" / "shot.png").read_bytes() == PNG
        assert len(provider.received) == 1  # one paid render
        assert len(cdn.received) == 3
        (attempt,) = attempts(afc)
        assert attempt["status"] == "succeeded" and attempt["cost"] == "0.040000", attempt
    finally:
        provider.stop()
        cdn.stop()


@pytest.mark.parametrize(
    "page, said",
    [
        (LOGIN, "an HTML page (text/html)"),
        (b"  <html><body>403 Forbidden</body></html>", "an HTML page (text/html)"),
        (b"", "an empty body"),
    ],
)
def test_an_output_url_that_keeps_answering_a_page_fails_the_attempt_at_its_cost(
    monkeypatch, page, said
):
    """The page still there after the fetches: the attempt fails as for an output out of
    reach (fetched again in later rounds while the provider keeps it; one round here), the
    paid render's usage and cost kept, nothing returned as the output."""
    cdn = WireServer(pages_then_png([page] * 100))
    provider_server = WireServer(answered(dalle(f"{cdn.url}/out.png")))
    try:
        provider = adapter(monkeypatch, OpenAIProvider, "OPENAI_BASE_URL", provider_server.url)
        with pytest.raises(ProviderError) as caught:
            rendered(provider, "dall-e-3")
    finally:
        provider_server.stop()
        cdn.stop()
    failure = caught.value
    assert said in failure.message and "not the output" in failure.message, failure.message
    assert failure.error_class == "unavailable"
    assert failure.cost_micros == 40_000 and failure.usage == {"images": 1}
    assert len(provider_server.received) == 1
    assert len(cdn.received) == FETCH_TRIES


def test_a_png_labelled_text_html_is_still_the_output(monkeypatch):
    """The check is of the bytes: an image a misconfigured CDN labels ``text/html`` is the
    output all the same."""
    cdn = WireServer(answered(reply("200 OK", PNG, {"Content-Type": "text/html"})))
    provider_server = WireServer(answered(dalle(f"{cdn.url}/out.png")))
    try:
        provider = adapter(monkeypatch, OpenAIProvider, "OPENAI_BASE_URL", provider_server.url)
        result = rendered(provider, "dall-e-3")
    finally:
        provider_server.stop()
        cdn.stop()
    assert result.data == PNG


def test_an_empty_data_url_is_no_output():
    """fal's ``sync_mode`` output sent inline as a ``data:`` URL with no data was decoded to
    an empty output, stored as the job's image, and the job succeeded."""
    import asyncio

    from afc_cli.providers.http import download

    with pytest.raises(ProviderError) as caught:
        asyncio.run(download(None, "fal", "data:image/png;base64,"))
    assert caught.value.error_class == "server" and "no data" in caught.value.message


# --- what an answer decodes to -----------------------------------------------------------------


def gzipped_twice(zeros: int) -> bytes:
    """``zeros`` zero bytes gzipped, then gzipped again: a few KB on the wire."""
    import gzip
    import zlib

    inner = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1024**2)
    parts = [inner.compress(block) for _ in range(zeros // len(block))]
    return gzip.compress(b"".join(parts) + inner.flush(), 9)


def test_an_output_in_stacked_codings_is_not_decoded_whole_in_one_piece(monkeypatch):
    """An output URL answering ``Content-Encoding: gzip, gzip`` (a few KB on the wire): the
    first chunk read decoded in one piece to everything (the ratios multiply: 10 KB can be
    10 GB) before the download counted a byte, and a run killed for its memory leaves every
    call in flight possibly paid. An answer in stacked codings (afc asks for one) is refused
    unread, a failed fetch at the render's known cost; this one decodes to 96 MiB, which
    must never be held (the output limit lowered to 1 MiB here)."""
    import tracemalloc

    from afc_cli.providers import http

    monkeypatch.setattr(http, "MAX_OUTPUT_BYTES", 1024**2)
    bomb = gzipped_twice(96 * 1024**2)
    assert len(bomb) < 64 * 1024  # one chunk on the wire
    headers = {"Content-Type": "image/png", "Content-Encoding": "gzip, gzip"}
    cdn = WireServer(answered(reply("200 OK", bomb, headers)))
    provider_server = WireServer(answered(dalle(f"{cdn.url}/out.png")))
    tracemalloc.start()
    try:
        provider = adapter(monkeypatch, OpenAIProvider, "OPENAI_BASE_URL", provider_server.url)
        with pytest.raises(ProviderError) as caught:
            rendered(provider, "dall-e-3")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        provider_server.stop()
        cdn.stop()
    assert peak < 32 * 1024**2, f"{peak / 1024**2:.0f} MiB held"
    assert caught.value.cost_micros == 40_000  # the render's known cost
    assert len(provider_server.received) == 1


def test_an_output_that_does_not_decode_is_a_failed_fetch_not_a_stopped_run(afc):
    """A CDN answering ``Content-Encoding: gzip`` with a body that is not gzip (a proxy that
    labels what it did not compress): httpx's DecodingError is no transport error, so it
    escaped the download as an answer afc could not read; the run stopped ('a bug in afc's
    openai adapter'), the job stayed queued and the paid render was recorded at a cost
    unknown though its usage was known. It is a fetch that failed: tried again, then the
    attempt fails at its cost, and the run goes on."""
    headers = {"Content-Type": "image/png", "Content-Encoding": "gzip"}
    cdn = WireServer(answered(reply("200 OK", b"not gzip at all", headers)))
    provider = WireServer(answered(dalle(f"{cdn.url}/out.png")))
    try:
        data = manifest([{"key": "shot", "prompt": "a lighthouse"}], rates=OPENAI_RATES)
        # a window ends the fetch rounds (DALL-E's URLs are otherwise fetched for 55 min)
        data["defaults"]["chain"] = [
            {"provider": "openai", "model": "dall-e-3", "attempts": 1, "window_s": 2}
        ]
        afc.write_manifest(data)
        env = {**KEYS, "AFC_POLL_S": "0.05", "OPENAI_BASE_URL": f"{provider.url}/v1"}
        result = afc("submit", "manifest.yaml", env=env)
        assert "could not be read" not in result.stderr + result.stdout
        assert "bug in afc" not in result.stderr + result.stdout
        assert len(provider.received) == 1
        (attempt,) = attempts(afc)
        assert attempt["status"] == "failed", attempt
        assert attempt["cost"] == "0.040000" and attempt["cost_source"] == "derived", attempt
        assert afc.rows("SELECT status FROM jobs") == [("failed",)]
        assert len(cdn.received) >= FETCH_TRIES
    finally:
        provider.stop()
        cdn.stop()


def fal_result_pages(pages: int):
    """fal's queue API for one request ``r1``, its result answered ``pages`` times with a
    200 HTML page (a proxy's or captive portal's) before the result itself."""
    left = [pages]

    async def behaviour(head, body, writer) -> bool:
        method, path = head.split(b" ")[:2]
        if method == b"POST":
            writer.write(json_reply({"request_id": "r1"}))
        elif path.endswith(b"/status"):
            writer.write(json_reply({"status": "COMPLETED"}))
        elif left[0]:
            left[0] -= 1
            writer.write(reply("200 OK", LOGIN, {"Content-Type": "text/html"}))
        else:
            writer.write(json_reply(FAL_RESULT))
        await writer.drain()
        return True

    return behaviour


def test_a_fal_result_answered_200_with_a_page_is_fetched_again_not_paid_again(afc):
    """fal's result (the JSON naming the images, kept 5 minutes) answered 200 with an HTML
    page by a proxy or captive portal: read as a result without an image, the paid attempt
    failed ('fal: completed without an image', its cost unknown though fal had billed one
    image) and the next attempt paid for a new render. A result that is no JSON is a fetch
    that failed for a moment, as for an output: fetched again, and the render paid once."""
    provider = WireServer(fal_result_pages(2))
    try:
        data = manifest([{"key": "shot", "prompt": "a lighthouse"}], rates=FAL_RATES)
        data["defaults"]["chain"] = [
            {"provider": "fal", "model": "fal-ai/flux/dev", "attempts": 2, "window_s": 5}
        ]
        afc.write_manifest(data)
        env = {**KEYS, "AFC_POLL_S": "0.05", "FAL_QUEUE_URL": provider.url}
        result = afc("submit", "manifest.yaml", env=env)
        assert result.returncode == 0, result.stderr
        assert (afc.outputs() / "b1" / "shot.png").read_bytes() == PNG
        posts = [head for head, _ in provider.received if head.startswith(b"POST")]
        assert len(posts) == 1  # one paid render
        (attempt,) = attempts(afc)
        assert attempt["status"] == "succeeded" and attempt["cost"] == "0.025000", attempt
    finally:
        provider.stop()


def cdn_download(monkeypatch, payload: bytes):
    """An OpenAI render whose output URL answers ``payload``: the result, or the failure;
    and what the CDN received."""
    cdn = WireServer(answered(payload))
    provider_server = WireServer(answered(dalle(f"{cdn.url}/out.png")))
    try:
        provider = adapter(monkeypatch, OpenAIProvider, "OPENAI_BASE_URL", provider_server.url)
        try:
            return rendered(provider, "dall-e-3"), cdn.received
        except ProviderError as exc:
            return exc, cdn.received
    finally:
        provider_server.stop()
        cdn.stop()


def test_an_output_in_a_coding_httpx_cannot_decode_is_not_stored_encoded(monkeypatch):
    """An output answered ``Content-Encoding: br`` where the brotli package is not installed
    (afc does not ask for it): httpx passes a coding it has no decoder for as it is, so the
    compressed bytes were the job's output and the job succeeded. Refused unread: a failed
    fetch at the render's known cost."""
    headers = {"Content-Type": "image/png", "Content-Encoding": "br"}
    found, _ = cdn_download(monkeypatch, reply("200 OK", b"\x1b\x03\x00\xf8brotli", headers))
    assert isinstance(found, ProviderError), found.data
    assert found.cost_micros == 40_000


def test_an_output_in_x_gzip_is_decoded_as_gzip(monkeypatch):
    """``x-gzip`` is gzip's old name (RFC 9110: a recipient takes it as gzip); httpx passed it
    as it is, and the gzipped bytes were stored as the image."""
    import gzip

    headers = {"Content-Type": "image/png", "Content-Encoding": "x-gzip"}
    found, _ = cdn_download(monkeypatch, reply("200 OK", gzip.compress(PNG), headers))
    assert not isinstance(found, ProviderError), found.message
    assert found.data == PNG


def test_afc_asks_only_for_the_codings_it_decodes_bounded(monkeypatch):
    """httpx asks for brotli and zstd wherever their packages are installed (another tool's
    dependency is enough), and decodes them without bound: a chunk of either can decode to
    gigabytes in one piece. afc asks for gzip and deflate only, whatever is installed."""
    import httpx._client

    monkeypatch.setattr(httpx._client, "ACCEPT_ENCODING", "gzip, deflate, br, zstd")
    found, received = cdn_download(monkeypatch, reply("200 OK", PNG, {"Content-Type": "image/png"}))
    assert found.data == PNG
    ((head, _),) = received
    assert b"accept-encoding: gzip, deflate\r\n" in head.lower(), head
