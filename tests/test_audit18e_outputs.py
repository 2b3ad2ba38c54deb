"""What an output download stores, reviewed (outside audit 18e): a page in place of an output
is refused, but an output that is a web page is stored."""

from __future__ import annotations

import asyncio

import pytest
from test_audit_wire import WireServer, answered, reply

from afc_cli.providers.base import ProviderError
from afc_cli.providers.http import download, new_client

PAGE = b"<!DOCTYPE html>\n<html><head><title>Chart</title></head><body><svg></svg></body></html>"


def _download(url: str) -> bytes:
    async def main() -> bytes:
        client = new_client(read_s=2.0)
        try:
            return await download(client, "replicate", url, sleep=lambda s: asyncio.sleep(0))
        finally:
            await client.aclose()

    return asyncio.run(main())


def test_an_output_url_that_names_a_web_page_stores_the_page():
    """A model's output may be a web page (a Replicate model's interactive chart, its URL
    ending in .html; README 'afc serve' sends an HTML output sandboxed). Every 200 whose
    bytes are an HTML document was taken for a captive portal's or a CDN's page: fetched
    again for up to 55 minutes while Replicate keeps it, then the paid attempt failed
    'unavailable', the next attempt paying for a render that comes back the same. An output
    URL that names an HTML file is the page; one naming another file (an image) that answers
    with a page is still no output."""
    cdn = WireServer(answered(reply("200 OK", PAGE, {"Content-Type": "text/html"})))
    try:
        assert _download(f"{cdn.url}/files/out/index.html?sig=1") == PAGE
        assert _download(f"{cdn.url}/files/out/chart.HTM") == PAGE
        with pytest.raises(ProviderError) as caught:
            _download(f"{cdn.url}/files/out/out-0.png")
        assert "an HTML page" in caught.value.message
    finally:
        cdn.stop()
