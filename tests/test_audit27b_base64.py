"""Outside audit 27b: an image sent inline as base64 (OpenAI's ``b64_json``, Gemini's
``inlineData``, fal's ``data:`` URLs) that carries characters base64 has not.

Python's ``base64.b64decode`` skips every character outside base64's alphabet: an
OpenAI-compatible gateway's ``b64_json`` written as a data URL
(``data:image/jpeg;base64,...``) decoded to bytes that are no image (the prefix's letters read
as base64), stored as the job's output, and the job succeeded; with ``data:image/png``'s
prefix the count of letters left it undecodable, and every attempt paid for an image afc
then could not read. A data URL's own base64 is now decoded, and base64 with other characters
in it is the provider's fault (``server``, the render's cost kept), never bytes made up of
what was left."""

from __future__ import annotations

import base64

import pytest
from conftest import manifest
from test_providers import FAST, MODELS, RATES

from afc_cli.providers.base import ProviderError
from afc_cli.providers.http import decode_b64
from afc_cli.providers.local import render_png


def submit(afc, prompt: str):
    data = manifest([{"key": "shot", "prompt": prompt}], rates=RATES)
    data["defaults"]["chain"] = [
        {"provider": "openai", "model": MODELS["openai"], "attempts": 1, "backoff": FAST}
    ]
    afc.write_manifest(data)
    return afc("submit", "manifest.yaml")


@pytest.mark.parametrize("prompt", ["b64-data-url jpeg", "b64-data-url png"])
def test_a_b64_json_written_as_a_data_url_is_the_image(afc, fake, prompt):
    result = submit(afc, prompt)
    assert result.returncode == 0, result.stderr
    assert (afc.outputs() / "b1" / "shot.png").read_bytes() == render_png(prompt, 32, 32)
    assert fake.counts["openai_billed"] == 1


def test_base64_with_other_characters_is_never_stored(afc, fake):
    result = submit(afc, "b64-noise")
    assert result.returncode == 1, result.stderr
    assert not (afc.outputs() / "b1" / "shot.png").exists()
    (attempt,) = afc.json("show", "shot", expect=None)["attempts"]
    assert attempt["status"] == "failed" and attempt["error_class"] == "server", attempt
    assert "base64 could not be decoded" in attempt["error"], attempt
    assert attempt["cost"] is not None and attempt["cost_source"] == "derived", attempt


PNG = render_png("b64", 16, 16)
TEXT = base64.b64encode(PNG).decode()


@pytest.mark.parametrize(
    "value",
    [
        TEXT,
        "\n".join(TEXT[i : i + 76] for i in range(0, len(TEXT), 76)),  # MIME's lines
        f"data:image/png;base64,{TEXT}",
        f"DATA:image/webp;BASE64,{TEXT}",
        base64.urlsafe_b64encode(PNG).decode(),
    ],
    ids=["plain", "lines", "data-url", "data-url-upper", "url-safe"],
)
def test_what_decodes(value):
    assert decode_b64("x", value) == PNG


@pytest.mark.parametrize(
    "value", [f"{TEXT[:8]}!{TEXT[8:]}", f"data:image/png;base64,{TEXT}%%", "QUJ", "===="]
)
def test_what_does_not(value):
    with pytest.raises(ProviderError) as caught:
        decode_b64("x", value, cost=40_000)
    assert caught.value.error_class == "server" and caught.value.cost_micros == 40_000
