"""The run loop's per-job work cut at width (issue 15, fourth session): the transport's lean
path (what it keeps between requests, and that a request still goes out whole, a multipart
body and a large answer included). Real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json

import httpx
from test_issue15_http import RawServer

from afc_cli.providers.http import new_client
from afc_cli.providers.transport import PoolTransport


def answering(reply: bytes):
    """A behaviour for ``RawServer``: answer every request with ``reply``."""

    async def behaviour(writer) -> bool:
        writer.write(reply)
        await writer.drain()
        return True

    return behaviour


def reply(payload: bytes) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Request-Id: req_1\r\n"
        + f"Content-Length: {len(payload)}\r\n\r\n".encode()
        + payload
    )


def headers_of(head: bytes) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            found.setdefault(name.strip().lower(), []).append(value.strip())
    return found


def test_a_request_goes_out_whole_and_its_timeouts_and_url_are_made_once():
    big = json.dumps({"data": [{"b64_json": "A" * 300_000}]}).encode()  # many chunks

    async def main():
        async with RawServer(answering(reply(big))) as server:
            client = new_client(connections=2)
            transport = client._transport
            assert isinstance(transport, PoolTransport)
            url = httpx.URL(f"http://127.0.0.1:{server.port}/v1/images/generations")
            try:
                answers = []
                for prompt in ("one", "two"):
                    response = await client.post(
                        url,
                        json={"prompt": prompt},
                        headers=[
                            ("Authorization", "Bearer sk-test"),
                            ("X-Dup", "a"),
                            ("X-Dup", "b"),
                        ],
                    )
                    answers.append(
                        (response.status_code, response.headers["x-request-id"], response.json())
                    )
                form = await client.post(
                    url,
                    data={"model": "m"},
                    files=[("image[]", ("a.png", b"\x89PNG", "image/png"))],
                )
                assert form.status_code == 200
                return answers, dict(transport._timeouts), dict(transport._urls)
            finally:
                await client.aclose()

    answers, timeouts, urls = asyncio.run(main())
    assert [(status, rid) for status, rid, _ in answers] == [(200, "req_1"), (200, "req_1")]
    assert answers[0][2] == json.loads(big)  # the whole body, read in chunks
    assert len(timeouts) == 1 and len(urls) == 1  # made once, used by all three requests


def test_headers_and_bodies_reach_the_server(tmp_path):
    async def main():
        async with RawServer(answering(reply(b"{}"))) as server:
            client = new_client(connections=1)
            url = f"http://127.0.0.1:{server.port}/v1/x"
            try:
                await client.post(
                    url,
                    json={"prompt": "é"},
                    headers=[("Authorization", "Bearer sk-test"), ("X-Dup", "a"), ("X-Dup", "b")],
                )
                await client.post(
                    url,
                    data={"model": "m"},
                    files=[("image[]", ("a.png", b"\x89PNG", "image/png"))],
                )
            finally:
                await client.aclose()
            return server.received

    (head, body), (form_head, form_body) = asyncio.run(main())
    assert head.startswith(b"POST /v1/x HTTP/1.1\r\n")
    headers = headers_of(head)
    assert headers["authorization"] == ["Bearer sk-test"]
    assert headers["x-dup"] == ["a", "b"]  # a repeated header is sent as it was given
    assert headers["content-type"] == ["application/json"]
    assert json.loads(body) == {"prompt": "é"}
    form = headers_of(form_head)
    assert form["content-type"][0].startswith("multipart/form-data; boundary=")
    assert b'name="image[]"; filename="a.png"' in form_body and b"\x89PNG" in form_body
    assert b'name="model"' in form_body


def test_the_url_cache_stays_bounded():
    transport = PoolTransport()
    for i in range(PoolTransport.URL_CACHE * 3):
        transport._url(httpx.URL(f"http://127.0.0.1:9/v1/predictions/{i}"))
    assert 0 < len(transport._urls) <= PoolTransport.URL_CACHE


def test_the_ledgers_json_is_the_text_it_was():
    from afc_cli.ledger.core import _dumps

    for value in (
        {"b": 1, "a": [1.5, None, True], "é": "ü\u2028"},
        {"provider": "openai", "model": "gpt-image-1", "attempt": 1},
        [],
        "text",
    ):
        assert _dumps(value) == json.dumps(value, sort_keys=True, separators=(",", ":"))
    assert _dumps(None) is None


def test_the_file_helper_keeps_a_stable_objects_callable_and_sends_others_fresh(tmp_path):
    from collections import Counter

    from afc_cli.offload import FileWorker
    from afc_cli.spool import Spool

    spool = Spool(tmp_path / "spool")
    counts = Counter(a=1)

    async def main():
        worker = FileWorker()
        await worker.start()
        try:
            paths = [await worker.call(spool.path, f"job-{i}") for i in range(3)]
            first = await worker.call(counts.most_common)
            counts["b"] = 5  # a change to an object that is not offload_stable reaches the helper
            second = await worker.call(counts.most_common)
            return paths, first, second, len(worker._callables)
        finally:
            await worker.close()

    paths, first, second, kept = asyncio.run(main())
    assert paths == [spool.path(f"job-{i}") for i in range(3)]
    assert first == [("a", 1)] and second == [("b", 5), ("a", 1)]
    assert kept == 1  # spool.path, pickled once for three calls; the Counter's never kept


def test_a_partial_is_sent_fresh_and_never_kept(tmp_path):
    import functools

    from afc_cli.offload import FileWorker

    numbers = [1, 2]

    async def main():
        worker = FileWorker()
        await worker.start()
        try:
            call = functools.partial(sum, numbers)
            first = await worker.call(call)
            numbers.append(3)  # the partial's state changed: the helper sees it
            second = await worker.call(call)
            return first, second, len(worker._callables)
        finally:
            await worker.close()

    assert asyncio.run(main()) == (3, 6, 0)
