"""HTTP at width: the provider clients' pool (aiohttp's, under httpx's API), its error mapping,
pool sizing from the run's concurrency and limits, and jittered polling at most once per
prediction per interval. Servers are real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import json
import socket

import pytest
from fakeproviders import KEYS, FakeProviders

from afc_cli.costs import RateCards
from afc_cli.providers.base import AttemptRequest, ProviderError
from afc_cli.providers.http import HttpProvider, next_poll, size_pools
from afc_cli.providers.local import render_png
from afc_cli.providers.openai import OpenAIProvider
from afc_cli.providers.replicate import ReplicateProvider

# a whole PNG: an inline image cut short is no output (tests/test_audit33a_b64_images.py)
PNG = base64.b64encode(render_png("a lighthouse", 4, 4)).decode()


def request(provider: str, model: str, prompt: str = "a lighthouse") -> AttemptRequest:
    return AttemptRequest(
        job_id="j1",
        key="k1",
        prompt=prompt,
        params={},
        provider=provider,
        model=model,
        attempt=1,
        rates=RateCards(),
    )


class RawServer:
    """An asyncio HTTP/1.1 server whose behaviour per request is a coroutine; counts
    connections and keeps each request's head and body (``received``)."""

    def __init__(self, behaviour):
        self.behaviour = behaviour
        self.connections = 0
        self.received: list[tuple[bytes, bytes]] = []

    @property
    def requests(self) -> int:
        return len(self.received)

    async def handle(self, reader, writer):
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                self.received.append((head, await reader.readexactly(length)))
                if not await self.behaviour(writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def __aenter__(self):
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc):
        self.server.close()


def answer(body: dict) -> bytes:
    payload = json.dumps(body).encode()
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(payload)}\r\n\r\n".encode()
        + payload
    )


async def ok(writer) -> bool:
    await asyncio.sleep(0.05)
    writer.write(answer({"data": [{"b64_json": PNG}], "usage": {"input_tokens": 1}}))
    await writer.drain()
    return True


async def hang_up(writer) -> bool:
    return False  # read the request, close without a word


async def cut_body(writer) -> bool:
    writer.write(b'HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{"data": [')
    await writer.drain()
    return False


async def never(writer) -> bool:
    await asyncio.sleep(30)
    return False


def openai_at(monkeypatch, port: int, read_s: float = 300.0) -> OpenAIProvider:
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", KEYS["OPENAI_API_KEY"])
    provider = OpenAIProvider()
    provider.read_s = read_s
    return provider


def test_calls_at_width_reuse_kept_alive_connections(monkeypatch):
    async def main():
        async with RawServer(ok) as server:
            provider = openai_at(monkeypatch, server.port)
            provider.size_pool(4)
            try:
                slots = asyncio.Semaphore(4)

                async def one():
                    async with slots:
                        return await provider.render(request("openai", "gpt-image-1"))

                results = await asyncio.gather(*(one() for _ in range(12)))
            finally:
                await provider.close()
            return server, results

    server, results = asyncio.run(main())
    assert len(results) == 12 and all(r.data.startswith(b"\x89PNG") for r in results)
    assert server.requests == 12
    assert server.connections == 4  # three calls each on four kept-alive connections


@pytest.mark.parametrize(
    "behaviour, read_s, error_class",
    # a 200 whose body is cut: the image was made and lost on the way (server, its status kept)
    [(hang_up, 300.0, "unavailable"), (cut_body, 300.0, "server"), (never, 0.3, "timeout")],
)
def test_transport_failures_classify_as_before(monkeypatch, behaviour, read_s, error_class):
    """A dropped connection is not a timeout (httpx-aiohttp alone maps it to ConnectTimeout);
    no answer in time is. Either way the paid call's cost is unknown."""

    async def main():
        async with RawServer(behaviour) as server:
            provider = openai_at(monkeypatch, server.port, read_s=read_s)
            try:
                with pytest.raises(ProviderError) as caught:
                    await provider.render(request("openai", "gpt-image-1"))
            finally:
                await provider.close()
            return caught.value, server

    error, server = asyncio.run(main())
    assert error.error_class == error_class, error.message
    assert error.cost_micros is None
    assert server.requests == 1  # a paid POST is never resent on a dropped connection


def test_connection_refused_is_a_connect_error(monkeypatch):
    import httpx

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now

    async def main():
        provider = openai_at(monkeypatch, port)
        try:
            with pytest.raises(httpx.ConnectError):
                await provider.client.post(f"http://127.0.0.1:{port}/v1/images/generations")
            with pytest.raises(ProviderError) as caught:
                await provider.render(request("openai", "gpt-image-1"))
        finally:
            await provider.close()
        return caught.value

    assert asyncio.run(main()).error_class == "unavailable"


def test_pools_are_sized_to_concurrency_and_provider_limits():
    providers = {"openai": OpenAIProvider(), "replicate": ReplicateProvider(), "local": object()}
    size_pools(providers, 500, {"replicate": {"concurrency": 20, "per_minute": None}})
    assert providers["openai"].connections == 500
    assert providers["replicate"].connections == 20

    async def pool_of(provider: HttpProvider) -> int:
        try:
            return provider.client._transport.limits.max_connections
        finally:
            await provider.close()

    assert asyncio.run(pool_of(providers["openai"])) == 500
    assert asyncio.run(pool_of(providers["replicate"])) == 20
    size_pools(providers, 8, {"replicate": {"concurrency": 20}})
    assert providers["replicate"].connections == 8


def test_next_poll_first_about_one_interval_in_then_on_a_grid_of_intervals():
    # the first: half to one and a half intervals after the submit (at 10.0)
    assert next_poll(2.0, 0, lambda: 0.0, 10.0, 10.0) == 11.0
    assert next_poll(2.0, 0, lambda: 0.999, 10.0, 10.0) == pytest.approx(12.998)
    # later ones an interval after the previous one was due, however late it was sent
    assert next_poll(2.0, 1, lambda: 0.0, 11.0, 11.0) == 13.0
    assert next_poll(2.0, 5, lambda: 1.0, 11.0, 12.9) == 13.0  # late within its slot
    # sent later than its whole slot: the next goes in the slot after the one it went out in,
    # never two in one slot
    assert next_poll(2.0, 5, lambda: 1.0, 11.0, 13.0) == 15.0
    assert next_poll(2.0, 5, lambda: 1.0, 11.0, 16.5) == 17.0


def test_a_provider_whose_polls_all_fail_is_said_after_five_intervals_once(monkeypatch):
    monkeypatch.setenv("AFC_POLL_S", "2")
    now = [100.0]
    said: list[str] = []
    provider = ReplicateProvider()
    provider.clock = lambda: now[0]
    provider.watch_polls(said.append)
    for t in (100.0, 102.0, 105.0, 109.9):  # under five intervals (10 s) of failures
        now[0] = t
        provider.poll_failed("HTTP 503")
    assert said == []
    now[0] = 110.0
    provider.poll_failed("ConnectError")
    now[0] = 112.0
    provider.poll_failed("HTTP 503")  # said once, not again for each poll
    assert said == [
        "replicate: every poll has failed for 10s (last: ConnectError); afc keeps polling: the "
        "requests' ids are recorded and nothing is paid again (Ctrl-C stops the run; 'afc "
        "resume' polls them later)"
    ]
    now[0] = 113.5
    provider.poll_answered()
    assert said[1:] == ["replicate: polls answer again (after 14s of failures)"]
    # a poll that answers ends a streak that was never said without a word, and a new streak
    # counts from its own first failure
    provider.poll_failed("HTTP 429")
    now[0] = 120.0
    provider.poll_answered()
    now[0] = 130.0
    provider.poll_failed("HTTP 502")
    now[0] = 139.0
    provider.poll_failed("HTTP 502")
    assert len(said) == 2


def test_polls_average_one_per_interval_in_flight_however_late_the_loop_sends_them():
    """A request in flight for a time T is polled T / interval times on average (counted from
    the submit to the last poll's due time), whether the loop sends each poll on time or up to
    most of an interval late; and however late, no two polls ever go out in one slot of the
    grid (a loop that missed whole slots skips them rather than catching up)."""
    import random

    rng = random.Random(7)
    interval = 2.0
    for lateness in (0.0, 0.5, 1.0, 1.9, 5.0):
        for length in (0.5, 3.0, 5.0, 11.0):
            polls = span = 0.0
            for _ in range(2000):
                due = sent = first = 0.0
                count, slot = 0, -1
                while count == 0 or sent < length:
                    due = next_poll(interval, count, rng.random, due, sent)
                    first = first if count else due
                    sent = due + rng.random() * lateness
                    sent_in = int((sent - first) / interval + 1e-9)
                    assert sent_in > slot  # a slot of its own, after the previous poll's
                    slot = sent_in
                    count += 1
                polls += count
                span += due
            if lateness < interval:
                ratio = polls / (span / interval)
                assert ratio == pytest.approx(1.0, abs=0.05), (lateness, length)


def test_replicate_polls_once_per_interval_with_jitter(monkeypatch):
    server = FakeProviders().start()
    try:
        monkeypatch.setenv("REPLICATE_BASE_URL", f"{server.base}/v1")
        monkeypatch.setenv("REPLICATE_API_TOKEN", KEYS["REPLICATE_API_TOKEN"])
        monkeypatch.setenv("AFC_POLL_S", "2")
        waits: list[float] = []
        dice = iter([0.5, 0.3, 0.9, 0.1, 0.7, 0.2])
        now = [100.0]

        async def sleep(seconds: float) -> None:
            waits.append(seconds)  # no real sleep: the fake prediction advances per poll
            now[0] += seconds

        woke: list[float] = []

        def clock() -> float:  # the time a poll takes: an eighth of a second between reads
            now[0] += 0.125
            return now[0]

        async def sleep(seconds: float) -> None:  # noqa: F811 - records when each wait ends
            waits.append(seconds)  # no real sleep: the fake prediction advances per poll
            now[0] += seconds
            woke.append(now[0])

        provider = ReplicateProvider()
        provider.sleep = sleep
        provider.rand = lambda: next(dice)
        provider.clock = clock

        async def main():
            try:
                return await provider.render(request("replicate", "owner/model"))
            finally:
                await provider.close()

        result = asyncio.run(main())
    finally:
        server.stop()
    assert result.data.startswith(b"\x89PNG")
    polls = server.counts["replicate_poll"]
    assert polls == len(waits) >= 3  # one wait before every poll
    assert waits[0] == pytest.approx(2.0)  # the first: half to one and a half intervals in
    # each later one due a whole interval after the previous one was due (its answer's time
    # and the clock's reads are not added to the interval)
    assert woke == pytest.approx([woke[0] + 2.0 * n for n in range(polls)])


def test_an_inline_output_names_its_type_and_its_decoded_size_is_capped(monkeypatch):
    """A ``data:`` URL output (fal's ``sync_mode``, a Replicate model's inline file) is stored
    under its media type's extension (it was taken from the base64 text after the last '/'),
    and its decoded size is held to the download limit (percent-encoding can hold more bytes
    than its length suggests)."""
    from afc_cli.providers import http

    png = base64.b64encode(b"\x89PNG....").decode()
    assert http.output_ext(f"data:image/jpeg;base64,{png}") == "jpeg"
    assert http.output_ext("data:image/svg+xml,%3Csvg%3E") == "svg"
    assert http.output_ext("https://cdn.example/a/b/out.webp?sig=1") == "webp"
    assert http.output_ext("https://cdn.example/a/b/out") == "png"
    assert http.data_url_bytes("fal", "data:text/plain,a%20b") == b"a b"
    monkeypatch.setattr(http, "MAX_OUTPUT_BYTES", 4)
    with pytest.raises(ProviderError, match="larger than 2 GiB"):
        http.data_url_bytes("fal", "data:text/plain,AAAAAAA")  # 7 bytes, within 4/3 x 4 + 4
