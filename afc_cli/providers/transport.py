"""The HTTP transport under the provider adapters' httpx clients: aiohttp's connection pool,
through the ``httpx-aiohttp`` transport, with the adapters still speaking httpx's API.

Why not httpx's own transport: measured against a fake OpenAI server in its own process
(``bench/http_calls.py --transports``), an httpx client with its pool sized to the width took
10.2 s for 200 calls of 1 s at 100 wide and 67 s for 1,000 at 500 wide (httpx's pool is slow
under many concurrent requests, httpx issue #3215); the same client on this transport took
2.9 s and 4.9 s, where a bare asyncio client took 2.2 s and 2.9 s.

What this module adds to the library's transport:

- **One error vocabulary.** httpx-aiohttp maps every ``aiohttp.ClientConnectionError`` to
  ``httpx.ConnectTimeout`` (so a server that drops the connection mid-answer would read as a
  timeout) and lets ``OSError`` and other aiohttp errors through unmapped (an adapter catching
  ``httpx.TransportError`` would miss them). ``httpx_error`` maps them by cause instead: a
  refused or failed connect is ``ConnectError`` (the request never left), a connect that took
  too long ``ConnectTimeout``, no answer in time ``ReadTimeout``, a dropped connection
  ``RemoteProtocolError``, a broken body ``ReadError``. The adapters classify those as before.
- **No resent POST.** aiohttp retries a request on a reused keep-alive connection that turned
  out closed only for idempotent methods (GET, PUT, DELETE...); a paid POST is sent once.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport


def httpx_error(exc: BaseException) -> BaseException:
    """The httpx exception an aiohttp or socket failure stands for (``exc`` itself when it is
    neither)."""
    cause = exc.__cause__ if isinstance(exc, httpx.TransportError) and exc.__cause__ else exc
    message = str(cause) or cause.__class__.__name__
    if isinstance(cause, httpx.HTTPError):
        return cause
    if isinstance(cause, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(message)
    if isinstance(cause, TimeoutError):  # aiohttp's socket/server timeouts and asyncio's
        return httpx.ReadTimeout(message)
    if isinstance(cause, aiohttp.ClientConnectorError):
        return httpx.ConnectError(message)
    if isinstance(cause, aiohttp.ClientPayloadError):
        return httpx.ReadError(message)
    if isinstance(cause, aiohttp.ServerDisconnectedError):
        return httpx.RemoteProtocolError(message)
    if isinstance(cause, (aiohttp.ClientError, OSError)):
        return httpx.ReadError(message)
    return exc


class _Stream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream) -> None:
        self.inner = inner

    async def __aiter__(self):
        try:
            async for chunk in self.inner:
                yield chunk
        except Exception as exc:
            mapped = httpx_error(exc)
            if mapped is exc:
                raise
            raise mapped from exc

    async def aclose(self) -> None:
        try:
            await self.inner.aclose()
        except Exception as exc:
            mapped = httpx_error(exc)
            if mapped is exc:
                raise
            raise mapped from exc


class PoolTransport(AiohttpTransport):
    """httpx-aiohttp's transport with afc's error mapping (module docstring)."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await super().handle_async_request(request)
        except Exception as exc:
            mapped = httpx_error(exc)
            if mapped is exc:
                raise
            raise mapped from exc
        response.stream = _Stream(response.stream)
        return response


class LeanCookies(httpx.Cookies):
    """A client's cookie jar that looks at a response only when it sets a cookie. httpx
    hands every response to ``http.cookiejar``, which builds a urllib request (parsing the URL
    again) before it finds no ``Set-Cookie`` header: measured, an eighth of the client's CPU
    per call. The jar ignores ``Set-Cookie2`` anyway (its default policy is not RFC 2965),
    so skipping responses without ``Set-Cookie`` changes nothing it keeps."""

    def extract_cookies(self, response: httpx.Response) -> None:
        if "set-cookie" in response.headers:
            super().extract_cookies(response)


class LeanClient(httpx.AsyncClient):
    """httpx's client with ``LeanCookies`` for its jar; otherwise httpx's own."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._cookies = LeanCookies(self._cookies)

    @property
    def cookies(self) -> httpx.Cookies:
        return self._cookies

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        self._cookies = LeanCookies(cookies)


def pool_limits(connections: int) -> Any:
    """A pool of ``connections``, all kept alive between calls (for 30 s idle): at a width of
    hundreds, a connection closed after each call is a reconnect for the next one."""
    return httpx.Limits(
        max_connections=connections, max_keepalive_connections=connections, keepalive_expiry=30.0
    )


def new_transport(connections: int) -> PoolTransport:
    return PoolTransport(limits=pool_limits(connections))
