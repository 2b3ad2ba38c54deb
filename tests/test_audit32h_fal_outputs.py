"""Outside audit 32h: a fal model whose result is a file other than ``images`` (a video model's
``video``, an audio model's ``audio``), as fal's queue answers it. Through the real ``afc``
command against the fake fal queue (tests/fakeproviders.py), its result replaced here."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import manifest
from test_providers import FAST, MODELS, RATES


def _result_of(fake, field: str, ext: str, content_type: str, listed: bool = False) -> None:
    """A completed request's result: ``{field: {url, content_type, file_name, file_size}}``
    (a list of them with ``listed``), the file served by the fake's CDN."""
    request = fake.fal_request

    def wrapped(h, method, rid, tail):
        if tail or method != "GET":
            return request(h, method, rid, tail)
        fake.count("fal_result")
        file = {
            "url": f"{fake.base}/files/{rid}.{ext}",
            "content_type": content_type,
            "file_name": f"output.{ext}",
            "file_size": 1234,
        }
        return h.reply(200, {field: [file] if listed else file, "seed": 7, "timings": {}})

    fake.fal_request = wrapped


@pytest.mark.parametrize(
    "field, ext, content_type, listed",
    [
        ("video", "mp4", "video/mp4", False),  # fal-ai/kling-video, fal-ai/veo3, ...
        ("audio", "mp4", "audio/mp4", False),
        ("videos", "mp4", "video/mp4", True),
    ],
)
def test_a_result_naming_a_video_is_stored_not_paid_for_again(
    afc, fake, field, ext, content_type, listed
):
    """fal's video models answer ``{"video": {"url": ..., "content_type": "video/mp4"}}``.
    afc read ``images`` (or ``image``) alone: the request completed (rendered and billed), and
    the attempt failed ``server`` "completed without an image", its cost unknown; each of the
    model's attempts paid for the same clip again, and the job failed with nothing stored."""
    _result_of(fake, field, ext, content_type, listed)
    data = manifest([{"key": "clip", "prompt": "a lighthouse, slow dolly in"}], rates=RATES)
    data["defaults"]["chain"] = [
        {"provider": "fal", "model": MODELS["fal"], "attempts": 3, "backoff": FAST}
    ]
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    assert fake.counts["fal_submit"] == 1
    [attempt] = afc.json("show", "clip")["attempts"]
    assert attempt["status"] == "succeeded"
    assert attempt["cost"] == "0.025000"  # the card's per_image: one output made
    [stored] = [Path(o["path"]) for o in afc.json("outputs")["outputs"]]
    assert stored.read_bytes()[4:8] == b"ftyp"  # the clip itself (an MP4's first box)


def test_a_result_with_no_file_at_all_still_fails_as_before(afc, fake):
    """A result that names no file (no URL anywhere) is the provider's fault, as it was."""
    request = fake.fal_request

    def wrapped(h, method, rid, tail):
        if tail or method != "GET":
            return request(h, method, rid, tail)
        return h.reply(200, {"seed": 7, "timings": {"inference": 1.0}, "prompt": "x"})

    fake.fal_request = wrapped
    data = manifest([{"key": "clip", "prompt": "a lighthouse"}], rates=RATES)
    data["defaults"]["chain"] = [
        {"provider": "fal", "model": MODELS["fal"], "attempts": 1, "backoff": FAST}
    ]
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 1
    assert "completed without an image" in result.stderr


def test_an_image_models_empty_images_is_not_read_as_another_file(afc, fake):
    """An image model's result with ``images: []`` and a file elsewhere (an input echoed back,
    a mask) is read as it was: no image made, never that other file stored as the output."""
    request = fake.fal_request

    def wrapped(h, method, rid, tail):
        if tail or method != "GET":
            return request(h, method, rid, tail)
        echoed = {"url": f"{fake.base}/files/{rid}-input.png", "content_type": "image/png"}
        return h.reply(200, {"images": [], "input_image": echoed, "seed": 7})

    fake.fal_request = wrapped
    data = manifest([{"key": "shot", "prompt": "a lighthouse"}], rates=RATES)
    data["defaults"]["chain"] = [
        {"provider": "fal", "model": MODELS["fal"], "attempts": 1, "backoff": FAST}
    ]
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 1
    assert "completed without an image" in result.stderr
