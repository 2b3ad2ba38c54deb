"""The provider clients' per-call work cut at width: the cookie jar looks only at responses
that set a cookie (and still keeps those), and a run's fixed endpoints are parsed once. Real
sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import http.cookiejar

import httpx
from test_issue15_http import RawServer, answer

from afc_cli.providers.http import new_client
from afc_cli.providers.openai import OpenAIProvider


def test_the_jar_is_skipped_without_set_cookie_and_keeps_a_cookie_that_is_set(monkeypatch):
    looked = []
    real = http.cookiejar.CookieJar.extract_cookies

    def counting(self, response, request):
        looked.append(1)
        return real(self, response, request)

    monkeypatch.setattr(http.cookiejar.CookieJar, "extract_cookies", counting)
    sends_cookie = [False, True, False]
    seen_cookie_headers = []

    async def behaviour(writer) -> bool:
        reply = answer({"ok": True})
        if sends_cookie.pop(0):
            head, body = reply.split(b"\r\n\r\n", 1)
            reply = head + b"\r\nSet-Cookie: __cf_bm=abc; Path=/\r\n\r\n" + body
        writer.write(reply)
        await writer.drain()
        return True

    async def main():
        async with RawServer(behaviour) as server:
            client = new_client(connections=1)
            try:
                url = f"http://127.0.0.1:{server.port}/v1/x"
                for _ in range(3):
                    response = await client.post(url, json={})
                    seen_cookie_headers.append(response.request.headers.get("cookie"))
                return dict(client.cookies)
            finally:
                await client.aclose()

    cookies = asyncio.run(main())
    assert looked == [1]  # only the response with Set-Cookie went through the jar
    assert cookies == {"__cf_bm": "abc"}  # and its cookie was kept
    assert seen_cookie_headers == [None, None, "__cf_bm=abc"]  # and sent after


def test_a_fixed_endpoint_is_parsed_once_and_follows_the_base_url(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1/")
    provider = OpenAIProvider()
    first = provider.url("/images/generations")
    assert isinstance(first, httpx.URL)
    assert str(first) == "http://127.0.0.1:9/v1/images/generations"
    assert provider.url("/images/generations") is first  # from the cache
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:10/v1")
    assert str(provider.url("/images/generations")) == "http://127.0.0.1:10/v1/images/generations"
