"""Outside audit 32h: a synchronous provider's paid call (OpenAI, Gemini) given an attempt
window (``window_s``) longer than its client's read timeout. The servers are real sockets on
127.0.0.1 (``RawServer``) that take their time to answer, as a long render does."""

from __future__ import annotations

import asyncio
import base64
import dataclasses

import pytest
from fakeproviders import KEYS
from test_issue15_http import RawServer, answer, request

from afc_cli.providers.base import ProviderError
from afc_cli.providers.gemini import GeminiProvider
from afc_cli.providers.local import render_png
from afc_cli.providers.openai import OpenAIProvider

# a whole PNG: an inline image cut short is no output (tests/test_audit33a_b64_images.py)
PNG = base64.b64encode(render_png("a lighthouse", 4, 4)).decode()
ANSWERS = {
    "openai": {"data": [{"b64_json": PNG}], "usage": {"input_tokens": 9, "output_tokens": 4160}},
    "gemini": {
        "candidates": [
            {
                "content": {"parts": [{"inlineData": {"mimeType": "image/png", "data": PNG}}]},
                "finishReason": "STOP",
            }
        ],
        "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 1290},
    },
}


def _provider(monkeypatch, name: str, port: int, read_s: float):
    if name == "openai":
        monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", KEYS["OPENAI_API_KEY"])
        provider = OpenAIProvider()
    else:
        monkeypatch.setenv("GEMINI_BASE_URL", f"http://127.0.0.1:{port}/v1beta")
        monkeypatch.setenv("GEMINI_API_KEY", KEYS["GEMINI_API_KEY"])
        provider = GeminiProvider()
    provider.read_s = read_s
    return provider


def _render(monkeypatch, name: str, window_s: float | None, read_s: float = 0.3):
    """One call to a server that answers after 0.9 s, the client's read timeout ``read_s``."""

    async def slow(writer) -> bool:
        await asyncio.sleep(0.9)
        writer.write(answer(ANSWERS[name]))
        await writer.drain()
        return True

    async def main():
        async with RawServer(slow) as server:
            provider = _provider(monkeypatch, name, server.port, read_s)
            model = "gpt-image-1" if name == "openai" else "gemini-2.5-flash-image"
            try:
                call = dataclasses.replace(request(name, model), window_s=window_s)
                return await provider.render(call)
            finally:
                await provider.close()

    return asyncio.run(main())


@pytest.mark.parametrize("name", ["openai", "gemini"])
def test_a_window_longer_than_the_read_timeout_lets_the_render_answer(monkeypatch, name):
    """A user whose renders take longer than the client's read timeout (300 s for OpenAI and
    Gemini: gpt-image at high quality and 4K, a thinking image model) set ``window_s: 600``,
    which the pipeline enforces itself. The call was cut at the read timeout all the same, a
    ``timeout`` of unknown cost, and the next attempt on the same model paid for the render
    again (the first one, finished at the provider, billed too). The call's read timeout is
    the window when the window is longer."""
    result = _render(monkeypatch, name, window_s=3.0)
    assert result.data.startswith(b"\x89PNG")
    assert result.usage["images"] == 1


@pytest.mark.parametrize("name", ["openai", "gemini"])
def test_without_a_window_the_read_timeout_still_ends_a_silent_call(monkeypatch, name):
    with pytest.raises(ProviderError) as raised:
        _render(monkeypatch, name, window_s=None)
    assert raised.value.error_class == "timeout"
    assert raised.value.cost_micros is None  # sent: possibly paid


@pytest.mark.parametrize("name", ["openai", "gemini"])
def test_a_window_shorter_than_the_read_timeout_changes_nothing(monkeypatch, name):
    with pytest.raises(ProviderError) as raised:
        _render(monkeypatch, name, window_s=0.1)
    assert raised.value.error_class == "timeout"
