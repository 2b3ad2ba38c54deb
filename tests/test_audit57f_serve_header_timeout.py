"""Outside audit 57f: 'afc serve' closes a connection that has not sent a whole request's
headers in time. uvicorn has no such timeout: a connection that sent half a request, or
nothing, held its file descriptor for good, and once enough had come (a port scanner's, a
browser's unused preconnects, anyone's on the network: the token is asked for after the
headers) none was left, and every page, and a person's review decision being posted, hung
for everyone (measured through the real 'afc serve': 15 s after 50 such connections
opened, it held 58 descriptors before, 8 now). The protocol afc gives uvicorn is
driven here as uvicorn drives it, its loop's timer taken by hand (no real wait)."""

from __future__ import annotations

from typing import Any

import uvicorn
from uvicorn.server import ServerState

from afc_cli.web import server


class Loop:
    """The event loop as the protocol sees it: its timers kept, to be run by the test."""

    def __init__(self) -> None:
        self.timers: list[tuple[float, Any]] = []

    def call_later(self, delay: float, callback: Any, *args: Any) -> Any:
        loop = self

        class Handle:
            def cancel(self) -> None:
                loop.timers = [t for t in loop.timers if t[1] is not callback]

        self.timers.append((delay, callback))
        return Handle()


class Transport:
    def __init__(self) -> None:
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 40000)}.get(name)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def write(self, data: bytes) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _protocol(loop: Loop) -> Any:
    config = uvicorn.Config(lambda scope, receive, send: None, http=server.http_protocol())
    config.load()
    return config.http_protocol_class(config, ServerState(), {}, _loop=loop)


def test_a_connection_that_never_sends_its_headers_is_closed():
    loop = Loop()
    protocol = _protocol(loop)
    transport = Transport()
    protocol.connection_made(transport)
    protocol.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n")  # half a request, no more
    assert loop.timers, "a connection that sent half its headers was left open for good"
    [(delay, callback)] = loop.timers
    assert delay == server.HEADER_TIMEOUT_S
    callback()
    assert transport.closed
    protocol.connection_lost(None)
    assert loop.timers == []


class TaskLoop(Loop):
    """As ``Loop``, keeping the tasks uvicorn starts for a request (run by the test)."""

    def __init__(self) -> None:
        super().__init__()
        self.coroutines: list[Any] = []

    def create_task(self, coroutine: Any, **_: Any) -> Any:
        self.coroutines.append(coroutine)

        class Task:
            def add_done_callback(self, callback: Any) -> None:
                pass

        return Task()


def test_a_connection_that_sends_half_of_its_next_request_is_closed():
    """One whole request answered, then half of the next one's headers: uvicorn's keep-alive
    timer is let go at the first byte of the next request, and the headers' timer (from the
    connection's start) found a request begun (the first) and left the connection open, for
    good: anyone who can reach the port held a descriptor per connection with one request
    first. The next request's headers have ``HEADER_TIMEOUT_S`` from the answer's end."""
    import asyncio

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    loop = TaskLoop()
    config = uvicorn.Config(app, http=server.http_protocol())
    config.load()
    protocol = config.http_protocol_class(config, ServerState(), {}, _loop=loop)
    transport = Transport()
    protocol.connection_made(transport)
    protocol.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    [request] = loop.coroutines
    asyncio.run(request)  # answered: the first request's cycle is over
    protocol.data_received(b"GET / HTTP/1.1\r\nHo")  # the next one's headers, half
    assert loop.timers, "a connection with half its next request's headers was left open"
    for delay, callback in list(loop.timers):
        assert delay <= server.HEADER_TIMEOUT_S
        callback()
    assert transport.closed
    protocol.connection_lost(None)
    assert loop.timers == []
