"""Outside audit 29b: Gemini's thinking image models (gemini-3-pro-image) may answer their
interim "thought" images beside the final one, each a part marked ``"thought": true``: the
drafts the model made while reasoning, which Google does not bill as output images. Through
the real ``afc`` command against the fake Gemini server (tests/fakeproviders.py), its answer
replaced here by one of that shape."""

from __future__ import annotations

import base64
import hashlib

from conftest import manifest
from fakeproviders import render_png
from test_providers import FAST

MODEL = "gemini-3-pro-image-preview"
RATES = [{"provider": "gemini", "model": MODEL, "per_image": "0.134"}]


def png(name: str) -> bytes:
    return render_png(name, 32, 32)


def part(data: bytes, thought: bool = False) -> dict:
    made = {"inlineData": {"mimeType": "image/png", "data": base64.b64encode(data).decode()}}
    return {**made, "thought": True} if thought else made


def answer_with(fake, parts: list[dict], finish: str = "STOP") -> None:
    def gemini(h, model):
        h.body()
        return h.reply(
            200,
            {
                "candidates": [
                    {"content": {"parts": parts, "role": "model"}, "finishReason": finish}
                ],
                "usageMetadata": {
                    "promptTokenCount": 10,
                    "candidatesTokenCount": 1120,
                    "thoughtsTokenCount": 300,
                    "totalTokenCount": 1430,
                },
                "responseId": "resp-thinking-01",
            },
        )

    fake.gemini = gemini


def run(afc):
    data = manifest([{"key": "shot", "prompt": "a lighthouse"}], rates=RATES)
    data["defaults"]["chain"] = [
        {"provider": "gemini", "model": MODEL, "attempts": 2, "backoff": FAST}
    ]
    afc.write_manifest(data)
    return afc("submit", "manifest.yaml", "--json")


def test_the_final_image_is_kept_and_priced_not_the_thought_drafts(afc, fake):
    """Two thought drafts, then the final image. afc kept the first image part (a draft, the
    model's rough test of its composition) as the job's output, and counted all three as
    images made: a per-image card priced the answer at three times its bill. The final image
    is the output, and one image is priced."""
    answer_with(
        fake,
        [
            {"text": "Composing the scene", "thought": True},
            part(png("draft-1"), thought=True),
            part(png("draft-2"), thought=True),
            part(png("final")),
        ],
    )
    result = run(afc)
    assert result.returncode == 0, result.stderr
    (attempt,) = afc.json("show", "shot")["attempts"]
    assert attempt["status"] == "succeeded", attempt
    assert attempt["usage"]["images"] == 1, attempt
    assert attempt["cost"] == "0.134000", attempt
    (output,) = afc.json("outputs")["outputs"]
    assert output["sha256"] == hashlib.sha256(png("final")).hexdigest(), output


def test_an_answer_of_thought_drafts_alone_made_no_image(afc, fake):
    """Drafts but no final image (the final one withheld: IMAGE_SAFETY): no draft is stored
    as the job's output; the answer is a refusal, as an image withheld is."""
    answer_with(
        fake,
        [part(png("draft-1"), thought=True), {"text": "Checking the layout", "thought": True}],
        finish="IMAGE_SAFETY",
    )
    result = run(afc)
    assert result.returncode != 0, result.stdout
    attempts = afc.json("show", "shot")["attempts"]
    assert [a["error_class"] for a in attempts] == ["refusal", "refusal"], attempts
    assert afc.json("outputs")["outputs"] == []
    assert all("Checking the layout" not in (a["error"] or "") for a in attempts), attempts
