"""Outside audit 46 (c): a paid render whose output URL's host refuses the connection (or does
not resolve: a CDN's outage after the render). The output's GET never left, and its message
said "the request was never sent", beside the render's cost on the same attempt: 'afc show'
read "$0.04 ... connection failed (ConnectError); the request was never sent", as if the paid
request had not been sent. It now says the fetch of the output never reached its host, and
that the paid request was sent. Runs the real ``afc`` against a raw socket server
(tests/test_audit_wire.py)."""

from __future__ import annotations

import json
import socket

from conftest import manifest
from fakeproviders import KEYS
from test_audit_wire import WireServer, reply

from afc_cli.providers.http import transport_error


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_output_host_that_refuses_the_connection_does_not_say_the_paid_request_unsent(afc):
    url = f"http://127.0.0.1:{_closed_port()}/img/shot.png"
    answer = reply(
        "200 OK",
        json.dumps({"created": 1, "data": [{"url": url}]}).encode(),
        {"Content-Type": "application/json"},
    )

    async def behaviour(head, body, writer) -> bool:
        writer.write(answer)
        await writer.drain()
        return True

    server = WireServer(behaviour)
    try:
        data = manifest([{"key": "shot", "prompt": "a lighthouse"}])
        # the window bounds the rounds of fetches (DALL-E keeps its URLs about an hour)
        data["defaults"]["chain"] = [
            {"provider": "openai", "model": "dall-e-3", "attempts": 1, "window_s": 2}
        ]
        data["rates"] = [{"provider": "openai", "model": "dall-e-3", "per_image": "0.04"}]
        afc.write_manifest(data)
        env = {**KEYS, "OPENAI_BASE_URL": server.url, "AFC_POLL_S": "0.05"}
        result = afc("submit", "manifest.yaml", env=env)
        assert result.returncode == 1, result.stderr
        assert len(server.received) == 1  # the paid call, once
        [attempt] = afc.json("show", "shot", expect=None, env=env)["attempts"]
    finally:
        server.stop()
    assert attempt["status"] == "failed" and attempt["cost"] == "0.040000", attempt
    assert "ConnectError" in attempt["error"], attempt
    assert "the request was never sent" not in attempt["error"], attempt
    assert "fetching the output never reached its host" in attempt["error"], attempt
    assert "the paid request was sent" in attempt["error"], attempt


def test_a_paid_call_that_never_left_still_says_so():
    import httpx

    paid = transport_error("openai", httpx.ConnectError("refused"), paid_call=True)
    assert paid.message.endswith("; the request was never sent"), paid.message
    assert (paid.cost_micros, paid.cost_source) == (0, "unsent")
    result = transport_error(
        "fal", httpx.ConnectError("refused"), paid_call=False, fetching="its result"
    )
    assert "fetching its result never reached its host" in result.message, result.message
    assert "the request was never sent" not in result.message
