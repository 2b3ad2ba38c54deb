"""Outside audit 25 (b): a paid synchronous call (OpenAI, Gemini) answered with a success status
other than 200 (201 or 202 from a gateway in front of the provider, 204 with no body). Servers
are tests/test_audit_wire.py's raw sockets, the runs the real ``afc`` command."""

from __future__ import annotations

import base64
import json

import pytest
from conftest import manifest
from fakeproviders import KEYS
from test_audit_wire import PNG, WireServer, answered, attempts, reply

from afc_cli.providers.http import refused_free

B64 = base64.b64encode(PNG).decode()
OPENAI_ANSWER = {
    "created": 1,
    "data": [{"b64_json": B64}],
    "usage": {"input_tokens": 10, "output_tokens": 100},
}
GEMINI_ANSWER = {
    "candidates": [
        {
            "content": {"parts": [{"inlineData": {"mimeType": "image/png", "data": B64}}]},
            "finishReason": "STOP",
        }
    ],
    "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 1290},
    "responseId": "resp-1",
}


def submit(afc, provider: str, model: str, base: str):
    data = manifest(
        [{"key": "shot", "prompt": "a lighthouse"}],
        rates=[{"provider": provider, "model": model, "per_image": "0.04"}],
    )
    data["defaults"]["chain"] = [
        {
            "provider": provider,
            "model": model,
            "attempts": 2,
            "backoff": {"base": 0.01, "cap": 0.02},
        }
    ]
    afc.write_manifest(data)
    env = {"OPENAI_BASE_URL": base, "GEMINI_BASE_URL": f"{base}/v1beta"}
    return afc("submit", "manifest.yaml", env={**KEYS, **env})


@pytest.mark.parametrize(
    ("provider", "model", "answer", "status"),
    [
        ("openai", "gpt-image-1", OPENAI_ANSWER, "201 Created"),
        ("gemini", "gemini-2.5-flash-image", GEMINI_ANSWER, "202 Accepted"),
    ],
)
def test_a_paid_answer_of_another_success_status_keeps_its_image(
    afc, provider, model, answer, status
):
    """The image came, in the provider's own answer, under a 201 or 202: afc took any status
    but 200 for an error, 'invalid (HTTP 202)', recorded the call as costing a known 0 (the
    run 'spent 0.000000 USD') and threw the paid image away."""
    body = json.dumps(answer).encode()
    server = WireServer(answered(reply(status, body, {"Content-Type": "application/json"})))
    try:
        result = submit(afc, provider, model, server.url)
        assert result.returncode == 0, result.stderr
        assert len(server.received) == 1
        (attempt,) = attempts(afc)
        assert attempt["status"] == "succeeded" and attempt["cost"] == "0.040000", attempt
        (stored,) = list(afc.outputs().rglob("*.png"))
        assert stored.read_bytes() == PNG
    finally:
        server.stop()


def test_a_paid_call_answered_204_is_of_unknown_cost(afc):
    """A 204 (no body) to a paid call: the request was taken, and whether an image was made
    and billed is unknown; it was recorded as a known 0 and an input error."""
    server = WireServer(answered(reply("204 No Content")))
    try:
        result = submit(afc, "openai", "gpt-image-1", server.url)
        assert result.returncode == 1
        first = attempts(afc)[0]
        assert first["status"] == "failed" and "answered 204 with no image" in first["error"]
        assert first["cost"] is None and first["error_class"] == "server", first
        assert "unknown cost" in result.stderr, result.stderr
    finally:
        server.stop()


def test_only_an_error_status_is_known_to_be_free():
    assert refused_free(400) and refused_free(429) and refused_free(307)
    assert not any(refused_free(s) for s in (200, 201, 202, 204, 408, 500, 503))
