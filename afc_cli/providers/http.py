"""What the HTTP adapters share: one httpx client each, with explicit timeouts and no retries
of its own (afc's attempt runner is the one retry loop), and error classification."""

from __future__ import annotations

import os
import re
from typing import Any

from afc_cli.attempts import parse_retry_after
from afc_cli.providers.base import Provider, ProviderError

MAX_OUTPUT_BYTES = 2 * 1024**3


def new_client(read_s: float = 300.0) -> Any:
    import httpx

    # httpx sends each request once (no transport retries unless asked): a paid POST that
    # timed out is never resent behind afc's back.
    return httpx.AsyncClient(
        timeout=httpx.Timeout(connect=15.0, read=read_s, write=60.0, pool=60.0),
        follow_redirects=True,
    )


class HttpProvider(Provider):
    """A provider behind an HTTP API: its base URL (overridable from the environment, so
    tests point it at a local fake server) and one lazily made client."""

    base_env = ""
    default_base = ""
    read_s = 300.0  # how long one answer may take (a synchronous render, or one poll)

    def __init__(self) -> None:
        self._client: Any = None

    @property
    def base(self) -> str:
        return os.environ.get(self.base_env, self.default_base).rstrip("/")

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = new_client(read_s=self.read_s)
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def poll_interval() -> float:
    """Seconds between polls of a job-style provider (``AFC_POLL_S``, default 2)."""
    return float(os.environ.get("AFC_POLL_S", "2"))


def class_for_status(status: int) -> str:
    if status in (401, 403):
        return "auth"
    if status == 429:
        return "rate_limited"
    if status in (502, 503, 504):
        return "unavailable"
    if status >= 500:
        return "server"
    return "invalid"


def never_sent(exc: Exception) -> bool:
    """Whether a transport error proves the request never left this machine: no connection
    was made (refused, DNS, TLS handshake, connect timeout) or none was free in the pool. An
    error after the connection was made (a write, a read, a dropped connection) proves
    nothing: the provider may have the request and may bill it."""
    import httpx

    return isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)


def transport_error(provider: str, exc: Exception, *, paid_call: bool) -> ProviderError:
    """A request that got no answer. For a call that may have started paid work, its cost is
    unknown (null), unless the request provably never left (``never_sent``): then it is a
    known 0 with the source ``unsent``. For a download or a poll nothing was charged by it."""
    import httpx

    unsent = never_sent(exc)
    if isinstance(exc, httpx.TimeoutException):
        cls, what = "timeout", "no connection in time" if unsent else "no answer in time"
    else:
        cls, what = "unavailable", f"connection failed ({exc.__class__.__name__})"
    if unsent:
        what += "; the request was never sent"
    if paid_call and not unsent:
        return ProviderError(cls, f"{provider}: {what}", cost_micros=None, cost_source=None)
    return ProviderError(
        cls, f"{provider}: {what}", cost_micros=0, cost_source="unsent" if unsent else "derived"
    )


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")


def parse_reset(value: str | None) -> float | None:
    """OpenAI's x-ratelimit-reset-* ("1s", "6m0s", "20ms") in seconds."""
    if not value:
        return None
    total = 0.0
    found = False
    for number, unit in _DURATION.findall(value):
        found = True
        total += float(number) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]
    return total if found else None


def retry_after_of(headers: Any) -> float | None:
    seconds = parse_retry_after(headers.get("retry-after"))
    if seconds is None:
        ms = headers.get("retry-after-ms")
        if ms:
            try:
                seconds = float(ms) / 1000
            except ValueError:
                seconds = None
    if seconds is None:
        seconds = parse_reset(headers.get("x-ratelimit-reset-requests"))
    return seconds


async def download(client: Any, provider: str, url: str) -> bytes:
    """Fetch an output URL at once (providers delete them within minutes to an hour)."""
    import httpx

    try:
        async with client.stream("GET", url) as response:
            if response.status_code != 200:
                raise ProviderError(
                    "server" if response.status_code >= 500 else "unavailable",
                    f"{provider}: output download answered HTTP {response.status_code}",
                    http_status=response.status_code,
                    cost_micros=None,
                )
            chunks, size = [], 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > MAX_OUTPUT_BYTES:
                    raise ProviderError("invalid", f"{provider}: output larger than 2 GiB")
                chunks.append(chunk)
            return b"".join(chunks)
    except httpx.TransportError as exc:
        err = transport_error(provider, exc, paid_call=False)
        err.cost_micros, err.cost_source = None, None  # the render it belongs to was paid
        raise err from None


def json_or_empty(response: Any) -> dict[str, Any]:
    try:
        value = response.json()
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {"value": value}
