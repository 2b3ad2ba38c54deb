"""Outside audit 46 (c): an answer whose body does not decode as its ``Content-Encoding`` says
(a CDN serving plain bytes as ``gzip``, or brotli afc never asked for) was said as "connection
failed (AnswerUndecodable)": a person looked at the network, where the server's encoding was
what to fix. The body came, and was refused; the message now says what it was. Runs the real
``afc`` against raw socket servers (tests/test_audit_wire.py)."""

from __future__ import annotations

import json

from conftest import manifest
from fakeproviders import KEYS
from test_audit_wire import PNG, WireServer, reply


def _run(afc, server: WireServer, provider: str, model: str, env: dict[str, str]):
    data = manifest([{"key": "shot", "prompt": "a lighthouse"}])
    # the window bounds the rounds of fetches (DALL-E keeps its URLs about an hour)
    data["defaults"]["chain"] = [
        {"provider": provider, "model": model, "attempts": 1, "window_s": 2}
    ]
    data["rates"] = [{"provider": provider, "model": model, "per_image": "0.04"}]
    afc.write_manifest(data)
    env = {**KEYS, "AFC_POLL_S": "0.05", **env}
    result = afc("submit", "manifest.yaml", env=env)
    assert result.returncode == 1, result.stderr
    [attempt] = afc.json("show", "shot", expect=None, env=env)["attempts"]
    return attempt


def test_an_output_in_a_coding_afc_did_not_ask_for_is_said_so(afc):
    async def behaviour(head, body, writer) -> bool:
        if head.split(b" ")[1].startswith(b"/out/"):
            writer.write(
                reply("200 OK", PNG, {"Content-Type": "image/png", "Content-Encoding": "br"})
            )
        else:
            url = f"{server.url}/out/shot.png"
            data = json.dumps({"created": 1, "data": [{"url": url}]}).encode()
            writer.write(reply("200 OK", data, {"Content-Type": "application/json"}))
        await writer.drain()
        return True

    server = WireServer(behaviour)
    try:
        attempt = _run(afc, server, "openai", "dall-e-3", {"OPENAI_BASE_URL": server.url})
    finally:
        server.stop()
    assert attempt["status"] == "failed" and attempt["cost"] == "0.040000", attempt
    assert "connection failed" not in attempt["error"], attempt
    assert (
        "fetching the output: an answer in a content coding afc did not ask for (br)"
        in (attempt["error"])
    ), attempt


def test_a_paid_answer_that_does_not_decode_is_said_so(afc):
    async def behaviour(head, body, writer) -> bool:
        answer = json.dumps({"candidates": []}).encode()  # not gzip, though it says so
        writer.write(
            reply(
                "200 OK",
                answer,
                {"Content-Type": "application/json", "Content-Encoding": "gzip"},
            )
        )
        await writer.drain()
        return True

    server = WireServer(behaviour)
    try:
        env = {"GEMINI_BASE_URL": server.url}
        attempt = _run(afc, server, "gemini", "gemini-2.5-flash-image", env)
    finally:
        server.stop()
    assert attempt["status"] in ("failed", "unknown") and attempt["cost"] is None, attempt
    assert "connection failed" not in attempt["error"], attempt
    assert "an answer that does not decode" in attempt["error"], attempt
