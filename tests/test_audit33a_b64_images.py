"""Outside audit 33a: a paid image answered inline as base64 (OpenAI's ``b64_json``,
Gemini's ``inlineData``) that decodes to no image, or to an image cut short.

An output URL's download refuses a body that is no output or is cut short
(``http.not_an_output``, ``http.cut_short``: ``unavailable``, never stored). The same bytes
sent as base64 in the paid answer were not looked at: a line of text, or a PNG's first 40
bytes, was stored as the job's ``.png``, the job succeeded (exit 0), and the paid image was
lost with nothing said. Such an answer is now a failed ``unavailable`` attempt that keeps
the answer's usage, its cost by the card and its id, and the chain goes on as for that
class (here: the next attempt, then the fallback ``fallback_on: [unavailable]`` allows);
nothing is stored from it. A whole PNG, JPEG or WebP is stored as before."""

from __future__ import annotations

import io

import pytest
from conftest import manifest
from test_providers import FAST, MODELS, RATES

from afc_cli.providers.base import ProviderError
from afc_cli.providers.http import decode_b64
from afc_cli.providers.local import render_png

COSTS = {"openai": 166_650, "gemini": 38_703}  # 50/4160 tokens; 10/1290 tokens


def submit(afc, provider: str, prompt: str):
    rates = [*RATES, {"provider": "local", "model": "m1", "per_image": "0.05"}]
    data = manifest([{"key": "shot", "prompt": prompt}], rates=rates)
    data["defaults"]["chain"] = [
        {
            "provider": provider,
            "model": MODELS[provider],
            "attempts": 2,
            "backoff": FAST,
            "fallback_on": ["unavailable"],
        },
        {"provider": "local", "model": "m1", "attempts": 1, "backoff": FAST},
    ]
    afc.write_manifest(data)
    return afc("submit", "manifest.yaml")


@pytest.mark.parametrize("provider", ["openai", "gemini"])
@pytest.mark.parametrize(
    ("prompt", "said"),
    [
        ("b64-text", "decodes to 48 bytes that are no image"),
        ("b64-cut", "decodes to a PNG cut short (40 bytes, no IEND chunk)"),
    ],
)
def test_base64_of_no_whole_image_is_a_failed_paid_attempt(afc, fake, provider, prompt, said):
    result = submit(afc, provider, prompt)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    shown = afc.json("show", "shot", expect=None)
    paid = [a for a in shown["attempts"] if a["provider"] == provider]
    assert len(paid) == 2, shown["attempts"]
    for attempt in paid:
        assert attempt["status"] == "failed" and attempt["error_class"] == "unavailable", attempt
        assert said in attempt["error"] and "never stored" in attempt["error"], attempt
        assert attempt["cost_source"] == "derived", attempt
    rows = afc.rows(
        "SELECT cost_micros, provider_request_id FROM attempts WHERE provider = ?", (provider,)
    )
    assert [cost for cost, _ in rows] == [COSTS[provider]] * 2, rows
    assert all(rid for _, rid in rows), rows
    # the chain went on to the fallback, whose image is the one stored
    (last,) = [a for a in shown["attempts"] if a["provider"] == "local"]
    assert last["status"] == "succeeded", shown["attempts"]
    stored = (afc.outputs() / "b1" / "shot.png").read_bytes()
    assert stored.startswith(b"\x89PNG") and len(stored) > 40


@pytest.mark.parametrize("provider", ["openai", "gemini"])
def test_a_whole_image_is_stored(afc, fake, provider):
    result = submit(afc, provider, "a whole image")
    assert result.returncode == 0, result.stderr
    assert (afc.outputs() / "b1" / "shot.png").read_bytes() == render_png("a whole image", 32, 32)


def _jpeg_and_webp() -> list[bytes]:
    from PIL import Image

    made = []
    for kind in ("JPEG", "WEBP", "PNG", "GIF"):
        out = io.BytesIO()
        Image.new("RGB", (8, 8), (200, 30, 30)).save(out, kind)
        made.append(out.getvalue())
    return made


@pytest.mark.parametrize("data", _jpeg_and_webp(), ids=["jpeg", "webp", "png", "gif"])
def test_the_formats_a_provider_answers_are_taken(data):
    import base64

    assert decode_b64("openai", base64.b64encode(data).decode(), image=True) == data


@pytest.mark.parametrize(
    "data", [b"<!doctype html><html>login</html>", b'{"error": "no"}', b"GIF8", b"\x00" * 64]
)
def test_bytes_that_are_no_image_are_refused(data):
    import base64

    with pytest.raises(ProviderError) as caught:
        decode_b64("gemini", base64.b64encode(data).decode(), {"images": 1}, 7, "r", image=True)
    assert caught.value.error_class == "unavailable"
    assert caught.value.cost_micros == 7 and caught.value.request_id == "r"
    assert "no image" in caught.value.message
