"""A provider (or a proxy or CDN in front of it) that misbehaves below the JSON: redirects of
API calls and of output URLs, answers that drip in a byte at a time, bodies too big to hold.
Servers are raw asyncio sockets on 127.0.0.1, in a thread of their own so that a real ``afc``
child process can call them; the transport-level cases call an adapter in-process, as
tests/test_issue15_http.py does."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Awaitable, Callable

import pytest
from conftest import manifest
from fakeproviders import KEYS

from afc_cli.providers.base import ProviderError
from afc_cli.providers.gemini import GeminiProvider
from afc_cli.providers.local import render_png
from afc_cli.providers.openai import OpenAIProvider

PNG = render_png("wire", 16, 16)

Behaviour = Callable[[bytes, bytes, asyncio.StreamWriter], Awaitable[bool]]


class WireServer:
    """An HTTP/1.1 server on 127.0.0.1, run by an event loop in a thread of its own. Each
    request's head and body are kept (``received``); ``behaviour(head, body, writer)``
    answers it and says whether the connection stays open for the next request."""

    def __init__(self, behaviour: Behaviour):
        self.behaviour = behaviour
        self.received: list[tuple[bytes, bytes]] = []
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self.loop)

            async def start() -> None:
                self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
                self.port = self.server.sockets[0].getsockname()[1]
                ready.set()

            self.loop.run_until_complete(start())
            self.loop.run_forever()

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        ready.wait(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, reader, writer) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length)
                self.received.append((head, body))
                if not await self.behaviour(head, body, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def stop(self) -> None:
        async def close() -> None:
            self.server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def reply(status: str, body: bytes = b"", headers: dict[str, str] | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def json_reply(data: dict) -> bytes:
    return reply("200 OK", json.dumps(data).encode(), {"Content-Type": "application/json"})


def answered(payload: bytes) -> Behaviour:
    async def behaviour(head, body, writer) -> bool:
        writer.write(payload)
        await writer.drain()
        return True

    return behaviour


OPENAI_RATES = [{"provider": "openai", "model": "dall-e-3", "per_image": "0.04"}]


def run(afc, provider: str, model: str, rates: list[dict], env: dict[str, str]):
    """``afc submit`` of one job on ``provider``/``model``, one attempt, with ``env``."""
    data = manifest([{"key": "shot", "prompt": "a lighthouse"}], rates=rates)
    data["defaults"]["chain"] = [
        {
            "provider": provider,
            "model": model,
            "attempts": 1,
            "backoff": {"base": 0.01, "cap": 0.05},
        }
    ]
    afc.write_manifest(data)
    return afc("submit", "manifest.yaml", env={**KEYS, "AFC_POLL_S": "0.05", **env})


def run_fal(afc, provider: WireServer):
    """``run`` on fal's flux/dev, its queue at ``provider``."""
    rates = [{"provider": "fal", "model": "fal-ai/flux/dev", "per_image": "0.025"}]
    return run(afc, "fal", "fal-ai/flux/dev", rates, {"FAL_QUEUE_URL": provider.url})


def attempts(afc) -> list[dict]:
    return afc.json("show", "shot", expect=None)["attempts"]


# --- redirects -------------------------------------------------------------------------------


def test_a_paid_post_redirected_elsewhere_is_not_sent_again_nor_its_key(afc):
    """A 307 to a paid Gemini call, pointing at another host: httpx followed it, sending the
    POST again (a second paid request, behind afc's one retry loop) with ``x-goog-api-key``
    (httpx drops only ``Authorization`` on a redirect to another origin). No API call follows
    a redirect: the answer is the attempt's failure, a refused request that cost nothing."""
    elsewhere = WireServer(answered(json_reply({})))
    target = f"http://localhost:{elsewhere.port}/steal"
    provider = WireServer(answered(reply("307 Temporary Redirect", headers={"Location": target})))
    try:
        result = run(
            afc,
            "gemini",
            "gemini-2.5-flash-image",
            [{"provider": "gemini", "model": "gemini-2.5-flash-image", "per_image": "0.04"}],
            {"GEMINI_BASE_URL": f"{provider.url}/v1beta"},
        )
        assert "Traceback" not in result.stderr
        assert elsewhere.received == []  # neither the key nor a second paid POST
        assert len(provider.received) == 1
        (attempt,) = attempts(afc)
        assert attempt["status"] == "failed" and attempt["http_status"] == 307, attempt
        assert attempt["cost"] == "0.000000"  # a redirect rendered nothing
        assert result.returncode == 1
    finally:
        provider.stop()
        elsewhere.stop()


def test_a_paid_post_redirected_to_itself_is_sent_once(afc):
    """A proxy answering a paid OpenAI POST with a 308 back to the same URL: httpx re-sent the
    paid POST (body and key) 20 more times before it gave up with an exception afc stopped the
    run on."""
    provider = WireServer(
        answered(reply("308 Permanent Redirect", headers={"Location": "/v1/images/generations"}))
    )
    try:
        result = run(
            afc, "openai", "dall-e-3", OPENAI_RATES, {"OPENAI_BASE_URL": f"{provider.url}/v1"}
        )
        assert "Traceback" not in result.stderr
        assert len(provider.received) == 1, len(provider.received)
        (attempt,) = attempts(afc)
        assert attempt["status"] == "failed" and attempt["http_status"] == 308, attempt
        assert result.returncode == 1
    finally:
        provider.stop()


def dalle(url: str) -> bytes:
    return json_reply({"created": 1, "data": [{"url": url}]})


def test_an_output_url_redirecting_in_a_loop_fails_its_attempt_at_its_known_cost(afc):
    """A CDN whose output URL redirects to itself for ever: httpx's TooManyRedirects is no
    transport error, so it escaped the download as an answer afc could not read: the run
    stopped (exit 1) and the paid render was recorded at a cost unknown, though its usage
    (one image at 0.04) was known. It is the attempt's failure, at its cost."""
    cdn = WireServer(answered(reply("302 Found", headers={"Location": "/out.png"})))
    provider = WireServer(answered(dalle(f"{cdn.url}/out.png")))
    try:
        result = run(
            afc, "openai", "dall-e-3", OPENAI_RATES, {"OPENAI_BASE_URL": f"{provider.url}/v1"}
        )
        assert "Traceback" not in result.stderr
        assert len(provider.received) == 1
        (attempt,) = attempts(afc)
        assert attempt["status"] == "failed", attempt
        assert attempt["cost"] == "0.040000" and attempt["cost_source"] == "derived", attempt
        assert attempt["error"] == "openai: the output URL redirects too many times", attempt
        assert afc.json("status", expect=None)["jobs"][0]["status"] == "failed"
    finally:
        provider.stop()
        cdn.stop()


def test_an_output_url_redirected_to_another_host_is_fetched_without_a_key(afc):
    """Output URLs still follow redirects (a CDN's signed URL may), as one plain GET each, and
    no key goes with a download, wherever it is redirected. A redirected GET went out with an
    empty chunked body (``Transfer-Encoding: chunked``, ``Content-Type:
    application/octet-stream``): the transport handed httpx's unread request stream to
    aiohttp as a body."""
    store = WireServer(answered(reply("200 OK", PNG, {"Content-Type": "image/png"})))
    target = f"http://localhost:{store.port}/real.png"
    cdn = WireServer(answered(reply("302 Found", headers={"Location": target})))
    provider = WireServer(answered(dalle(f"{cdn.url}/out.png")))
    try:
        result = run(
            afc, "openai", "dall-e-3", OPENAI_RATES, {"OPENAI_BASE_URL": f"{provider.url}/v1"}
        )
        assert result.returncode == 0, result.stderr
        assert (afc.outputs() / "b1" / "shot.png").read_bytes() == PNG
        # one plain GET: no key, and no body (an empty chunked one, as httpx's redirected
        # request went out, is a GET a CDN such as CloudFront refuses with a 403)
        ((head, _),) = store.received
        assert b"authorization" not in head.lower() and KEYS["OPENAI_API_KEY"].encode() not in head
        assert b"transfer-encoding" not in head.lower() and b"content-type" not in head.lower()
    finally:
        provider.stop()
        cdn.stop()
        store.stop()


# --- answers that drip in --------------------------------------------------------------------


def drip(head: bytes) -> Behaviour:
    """Send ``head``, then a byte every 50 ms for as long as the client listens."""

    async def behaviour(_head, _body, writer) -> bool:
        writer.write(head)
        while True:
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.write(b" ")

    return behaviour


def adapter(monkeypatch, provider_class, base_env: str, base: str, read_s: float = 0.3):
    """An adapter pointed at ``base`` whose client's timeouts (read, pool) are all ``read_s``,
    with no pause between fetches and one round of them."""
    import httpx

    monkeypatch.setenv(base_env, base)
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    provider = provider_class()
    provider.client.timeout = httpx.Timeout(read_s)

    async def no_pause(seconds: float) -> None:
        return None

    provider.sleep = no_pause
    provider.keeps_outputs_s = 0.0
    return provider


def rendered(provider, model: str, per_image: str = "0.04"):
    """``provider.render`` of one request (its model priced ``per_image``), in a loop of its
    own; a safety net of 20 s turns a hang into a failure, not a stuck test."""
    from decimal import Decimal

    from afc_cli.costs import RateCards
    from afc_cli.providers.base import AttemptRequest

    cards = RateCards({(provider.name, model): {"per_image": Decimal(per_image)}})

    async def main():
        try:
            return await asyncio.wait_for(
                provider.render(
                    AttemptRequest(
                        job_id="j1",
                        key="k1",
                        prompt="a lighthouse",
                        params={},
                        provider=provider.name,
                        model=model,
                        attempt=1,
                        rates=cards,
                    )
                ),
                20,
            )
        finally:
            await provider.close()

    return asyncio.run(main())


HEAD_200 = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"


@pytest.mark.parametrize(
    "provider_class, base_env, path, head",
    [
        (OpenAIProvider, "OPENAI_BASE_URL", "/v1", HEAD_200),  # the body drips in
        (OpenAIProvider, "OPENAI_BASE_URL", "/v1", b"HTTP/1.1 200 OK\r\nX-Slow: "),  # headers
        (GeminiProvider, "GEMINI_BASE_URL", "/v1beta", HEAD_200),
    ],
)
def test_a_paid_answer_that_drips_in_ends_in_time(
    monkeypatch, provider_class, base_env, path, head
):
    """A paid call answered a byte every 50 ms, with no ``window_s``: each read came well
    within the read timeout, so the call (its job, the run, a cron slot) waited for ever. It
    ends as a timeout, possibly paid (cost unknown), as a silent server's does."""
    server = WireServer(drip(head))
    try:
        provider = adapter(monkeypatch, provider_class, base_env, server.url + path)
        with pytest.raises(ProviderError) as caught:
            rendered(provider, "dall-e-3")
    finally:
        server.stop()
    assert caught.value.error_class in ("timeout", "server"), caught.value.message
    assert "Timeout" in caught.value.message or "no answer in time" in caught.value.message
    assert caught.value.cost_micros is None
    assert len(server.received) == 1  # never sent again


def test_an_output_that_drips_in_fails_its_fetch_at_the_render_s_known_cost(monkeypatch):
    """A DALL-E output URL whose CDN drips the image in: the download waited for ever. Each
    GET ends in time; the paid attempt fails at its known cost (one image, 0.04)."""
    cdn = WireServer(drip(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"))
    provider_server = WireServer(answered(dalle(f"{cdn.url}/out.png")))
    try:
        provider = adapter(monkeypatch, OpenAIProvider, "OPENAI_BASE_URL", provider_server.url)
        with pytest.raises(ProviderError) as caught:
            rendered(provider, "dall-e-3")
    finally:
        provider_server.stop()
        cdn.stop()
    assert caught.value.error_class == "timeout", caught.value.message
    assert caught.value.cost_micros == 40_000 and caught.value.usage == {"images": 1}
    assert len(provider_server.received) == 1


def test_an_output_over_a_slow_link_is_fetched_whole(monkeypatch):
    """An output coming steadily at 160 KiB/s (a studio's link shared by many downloads, a
    slow CDN edge): not a drip, yet past the read timeout's credit each chunk gave only its
    time at 256 KiB/s, and the download was cut off round after round until the provider let
    the output go; the attempt then failed at its cost and the job paid for another render,
    cut off the same way (a video of 20-80 MB over a link below about 2 Mbit/s each). The
    floor is 64 KiB/s: the slow output comes whole, a drip still ends (the tests above)."""
    body = render_png("slow", 300, 300) + b"\0" * (300 * 1024)  # about 300 KiB, a PNG first

    async def steady(head, _body, writer) -> bool:
        writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode())
        for start in range(0, len(body), 16 * 1024):
            writer.write(body[start : start + 16 * 1024])
            await writer.drain()
            await asyncio.sleep(0.1)  # 16 KiB a tenth of a second: 160 KiB/s
        return True

    cdn = WireServer(steady)
    provider_server = WireServer(answered(dalle(f"{cdn.url}/out.png")))
    try:
        provider = adapter(monkeypatch, OpenAIProvider, "OPENAI_BASE_URL", provider_server.url)
        result = rendered(provider, "dall-e-3")
    finally:
        provider_server.stop()
        cdn.stop()
    data = result.data if isinstance(result.data, bytes) else result.data.path.read_bytes()
    assert data == body
    assert len(cdn.received) == 1, "the download was cut off and fetched again"


# --- answers too big to hold -----------------------------------------------------------------


def gzipped_answer(data: dict, padding: int) -> bytes:
    """``data`` as a JSON answer padded with ``padding`` spaces, sent gzipped: a small body on
    the wire that decodes to ``padding`` bytes and more."""
    import gzip

    text = json.dumps(data).encode()
    body = gzip.compress(text[:-1] + b" " * padding + b"}", 9)
    return reply("200 OK", body, {"Content-Type": "application/json", "Content-Encoding": "gzip"})


GEMINI_IMAGE = {
    "candidates": [
        {
            "content": {
                "parts": [
                    {
                        "inlineData": {
                            "mimeType": "image/png",
                            "data": base64.b64encode(PNG).decode(),
                        }
                    }
                ]
            },
            "finishReason": "STOP",
        }
    ],
    "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 1290},
}


@pytest.mark.parametrize(
    "provider_class, base_env, path, data",
    [
        (GeminiProvider, "GEMINI_BASE_URL", "/v1beta", GEMINI_IMAGE),
        (
            OpenAIProvider,
            "OPENAI_BASE_URL",
            "/v1",
            {"data": [{"b64_json": base64.b64encode(PNG).decode()}], "usage": {}},
        ),
    ],
)
def test_a_paid_answer_that_decodes_past_the_limit_is_not_held_whole(
    monkeypatch, provider_class, base_env, path, data
):
    """A paid answer gzipped from 8 MiB to a few KB (the limit lowered to 1 MiB here; it is
    256 MiB): httpx decoded it whole into memory, however large (a 10 MB bomb is 10 GB), and
    a run killed for its memory leaves every call in flight possibly paid. It is read up to
    the limit and ends as a body not read, its cost unknown."""
    from afc_cli.providers import transport

    monkeypatch.setattr(transport, "MAX_ANSWER_BYTES", 1024**2, raising=False)
    server = WireServer(answered(gzipped_answer(data, 8 * 1024**2)))
    try:
        provider = adapter(monkeypatch, provider_class, base_env, server.url + path)
        with pytest.raises(ProviderError) as caught:
            rendered(provider, "dall-e-3")
    finally:
        server.stop()
    assert "larger than 1 MiB" in caught.value.message or "AnswerTooLarge" in caught.value.message
    assert caught.value.cost_micros is None
    assert len(server.received) == 1
    assert len(gzipped_answer(data, 8 * 1024**2)) < 64 * 1024  # what the wire carried


def test_an_output_larger_than_the_json_limit_is_still_downloaded(monkeypatch):
    """The limit is for answers read whole: an output (streamed, counted up to 2 GiB by the
    download) is not cut at it."""
    from afc_cli.providers import transport

    monkeypatch.setattr(transport, "MAX_ANSWER_BYTES", 1024, raising=False)
    big = PNG + b"\0" * 4096
    cdn = WireServer(answered(reply("200 OK", big, {"Content-Type": "image/png"})))
    provider_server = WireServer(answered(dalle(f"{cdn.url}/out.png")))
    try:
        provider = adapter(monkeypatch, OpenAIProvider, "OPENAI_BASE_URL", provider_server.url)
        result = rendered(provider, "dall-e-3")
    finally:
        provider_server.stop()
        cdn.stop()
    assert result.data == big and result.cost_micros == 40_000


# --- the key goes only to the provider's own host --------------------------------------------

FAL_RESULT = {
    "images": [
        {
            "url": "data:image/png;base64," + base64.b64encode(PNG).decode(),
            "content_type": "image/png",
        }
    ]
}


def fal_queue(elsewhere: str) -> Behaviour:
    """fal's queue API for one request ``r1`` of ``fal-ai/flux/dev``, its submit answer naming
    its status, result and cancel URLs on ``elsewhere``."""

    async def behaviour(head, body, writer) -> bool:
        method, path = head.split(b" ")[:2]
        root = f"{elsewhere}/fal-ai/flux/requests/r1"
        if method == b"POST":
            data = {
                "request_id": "r1",
                "status_url": f"{root}/status",
                "response_url": root,
                "cancel_url": f"{root}/cancel",
            }
        elif path.endswith(b"/status"):
            data = {"status": "COMPLETED"}
        else:
            data = FAL_RESULT
        writer.write(json_reply(data))
        await writer.drain()
        return True

    return behaviour


def test_fal_urls_on_another_host_get_no_key(afc):
    """A fal submit answer (from a proxy in front of fal, or a fal gone wrong) naming its
    status and result URLs on another host: afc polled them there with ``Authorization: Key
    FAL_KEY``. URLs off the queue's own origin are not used: afc polls its own, on the queue
    it was given, and the render is fetched as usual."""
    elsewhere = WireServer(answered(json_reply({"status": "IN_QUEUE"})))
    provider = WireServer(answered(b""))
    provider.behaviour = fal_queue(f"http://localhost:{elsewhere.port}")
    elsewhere.behaviour = fal_queue(f"http://localhost:{elsewhere.port}")
    try:
        result = run_fal(afc, provider)
        assert result.returncode == 0, result.stderr
        assert elsewhere.received == []  # no poll, no key
        assert [head.split(b" ")[1] for head, _ in provider.received] == [
            b"/fal-ai/flux/dev",
            b"/fal-ai/flux/requests/r1/status",
            b"/fal-ai/flux/requests/r1",
        ]
        assert (afc.outputs() / "b1" / "shot.png").read_bytes() == PNG
    finally:
        provider.stop()
        elsewhere.stop()


# --- addresses no provider is at -------------------------------------------------------------


@pytest.fixture
def connects(monkeypatch) -> list[str]:
    """The addresses afc's HTTP clients connect to; any but 127.0.0.1 is refused here (no
    test sends a byte to a metadata service) and recorded."""
    import aiohappyeyeballs

    real = aiohappyeyeballs.start_connection
    elsewhere: list[str] = []

    async def start_connection(addr_infos, *args, **kwargs):
        addresses = [info[4][0] for info in addr_infos]
        if any(address != "127.0.0.1" for address in addresses):
            elsewhere.extend(addresses)
            raise OSError("the test allows 127.0.0.1 only")
        return await real(addr_infos, *args, **kwargs)

    monkeypatch.setattr(aiohappyeyeballs, "start_connection", start_connection)
    return elsewhere


@pytest.mark.parametrize(
    "location",
    [
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "http://[::ffff:169.254.169.254]/latest/meta-data/",
        "http://metadata.wire.test/latest/meta-data/",  # a name resolving there (below)
    ],
)
def test_an_output_redirected_to_the_metadata_service_is_never_fetched(
    monkeypatch, connects, location
):
    """A CDN (or a provider's answer) sending afc's download to the cloud's metadata service:
    afc fetched the instance's credentials and stored them as the job's output. The request
    is refused before it connects; the paid attempt fails at its known cost, at once (not in
    later rounds)."""
    import socket

    import aiohttp

    real_resolve = aiohttp.ThreadedResolver.resolve

    async def resolve(self, host, port=0, family=socket.AF_INET):
        if host == "metadata.wire.test":
            return [
                {
                    "hostname": host,
                    "host": "169.254.169.254",
                    "port": port,
                    "family": socket.AF_INET,
                    "proto": 0,
                    "flags": 0,
                }
            ]
        return await real_resolve(self, host, port, family)

    monkeypatch.setattr(aiohttp.ThreadedResolver, "resolve", resolve)
    cdn = WireServer(answered(reply("302 Found", headers={"Location": location})))
    provider_server = WireServer(answered(dalle(f"{cdn.url}/out.png")))
    try:
        provider = adapter(monkeypatch, OpenAIProvider, "OPENAI_BASE_URL", provider_server.url)
        provider.keeps_outputs_s = 3600.0  # a failure for a moment would be fetched again
        with pytest.raises(ProviderError) as caught:
            rendered(provider, "dall-e-3")
    finally:
        provider_server.stop()
        cdn.stop()
    assert connects == []
    assert caught.value.message == "openai: the answer's output URL cannot be fetched"
    assert caught.value.cost_micros == 40_000
    assert len(cdn.received) == 1  # one try: it will not pass later


def test_a_paid_call_to_a_link_local_base_url_is_never_sent_and_costs_0(monkeypatch, connects):
    """The same refusal for an API call (a base URL set there): never sent, a known 0."""
    provider = adapter(monkeypatch, GeminiProvider, "GEMINI_BASE_URL", "http://169.254.169.254")
    with pytest.raises(ProviderError) as caught:
        rendered(provider, "dall-e-3")
    assert connects == []
    assert caught.value.cost_micros == 0 and caught.value.cost_source == "unsent"


def test_fal_s_result_and_polls_still_follow_a_redirect_on_their_own_host(afc):
    """Free GETs follow redirects (fal's own client does): a status and a result answered
    with a 307 to another path of the queue are read there, with the key (same origin)."""

    async def behaviour(head, body, writer) -> bool:
        method, path = head.split(b" ")[:2]
        if path in (b"/fal-ai/flux/requests/r1/status", b"/fal-ai/flux/requests/r1"):
            moved = {"Location": path.decode() + "/moved"}
            writer.write(reply("307 Temporary Redirect", headers=moved))
        elif method == b"POST":
            writer.write(json_reply({"request_id": "r1"}))
        elif path.endswith(b"/status/moved"):
            writer.write(json_reply({"status": "COMPLETED"}))
        else:
            writer.write(json_reply(FAL_RESULT))
        await writer.drain()
        return True

    provider = WireServer(behaviour)
    try:
        result = run_fal(afc, provider)
        assert result.returncode == 0, result.stderr
        assert (afc.outputs() / "b1" / "shot.png").read_bytes() == PNG
        moved = [head for head, _ in provider.received if b"/moved" in head.split(b"\r\n")[0]]
        assert len(moved) == 2 and all(KEYS["FAL_KEY"].encode() in head for head in moved)
    finally:
        provider.stop()
