"""What is stored as a job's output, and what leaves the machine, found by an outside audit:
an output URL's answer that is no output is never stored as one, and a download's answer is
bounded in memory by its decoded bytes."""

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
from afc_cli.providers.http import FETCH_TRIES
from afc_cli.providers.openai import OpenAIProvider

LOGIN = b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head><body>Wi-Fi login</body></html>"


def pages_then_png(pages: list[bytes]):
    """A CDN that answers each of ``pages`` with 200 (an HTML page, or an empty body), in
    turn, then the PNG."""
    left = list(pages)

    async def behaviour(head, body, writer) -> bool:
        if left:
            page = left.pop(0)
            writer.write(reply("200 OK", page, {"Content-Type": "text/html; charset=utf-8"}))
        else:
            writer.write(reply("200 OK", PNG, {"Content-Type": "image/png"}))
        await writer.drain()
        return True

    return behaviour


def test_an_html_page_answered_200_for_an_output_is_fetched_again_not_stored(afc):
    """A captive portal (or a CDN's error page) answering an output's download with 200 and
    its login page: the page was stored as the job's image and the job succeeded, the paid
    render lost with nothing said. A page (or an empty body) is a try that failed for a
    moment, as a 503 is: the output is fetched again, stored once it comes, and the render is
    paid once."""
    cdn = WireServer(pages_then_png([LOGIN, b""]))
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
