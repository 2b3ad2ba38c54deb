"""Outside audit 63c: a fal request billed by resolution, completed, whose result fal had
already deleted (404: fal keeps a result of 10 KB or more six minutes) was priced as if each
image were one megapixel.

fal bills flux/dev 0.025 a megapixel of output. A 2048x2048 render (4 megapixels, 0.10 USD)
that completed while afc was away (a run killed after its submit, resumed past fal's
retention; or a cancel that found it ALREADY_COMPLETED) has no result left to read its size
from: afc priced it ``{"images": 1}``, 0.025 under a card with ``per_image`` (a quarter of the
bill), and unpriced under a ``per_megapixel`` card alone. The size is the request's own: its
``image_size`` (``{width, height}``, or one of fal's named presets, each 1 megapixel or less)
gives the megapixels the images were billed, as their result would have."""

from __future__ import annotations

import json

import pytest
from conftest import manifest

FLUX = "fal-ai/flux/dev"


def _write(afc, card: dict, params: dict) -> None:
    data = manifest(
        [{"key": "a", "prompt": "result-gone a", "params": params}],
        rates=[{"provider": "fal", "model": FLUX, **card}],
    )
    data["defaults"]["chain"] = [{"provider": "fal", "model": FLUX, "attempts": 1}]
    afc.write_manifest(data)


@pytest.mark.parametrize(
    ("card", "params", "cost"),
    [
        # 4 megapixels at 0.025: before, 0.025 (its per_image, one image)
        (
            {"per_megapixel": "0.025", "per_image": "0.025"},
            {"image_size": {"width": 2048, "height": 2048}},
            "0.100000",
        ),
        # two images of 1.5 megapixels, each rounded up to 2: before, unpriced
        (
            {"per_megapixel": "0.025"},
            {"image_size": {"width": 1536, "height": 1024}, "num_images": 2},
            "0.100000",
        ),
        # a named preset (1024 x 1024): before, unpriced
        ({"per_megapixel": "0.025"}, {"image_size": "square_hd"}, "0.025000"),
    ],
)
def test_a_deleted_result_is_priced_by_the_size_the_request_asked_for(
    afc, fake, card, params, cost
):
    _write(afc, card, params)
    result = afc("submit", "manifest.yaml", "--json")
    assert result.returncode == 1, result.stderr
    [job] = json.loads(result.stdout)["jobs"]
    assert job["error"]["class"] == "unavailable", job["error"]
    [attempt] = afc.json("show", "a")["attempts"]
    assert attempt["cost"] == cost, attempt
    total = afc.json("costs", "report")["total"]
    assert (total["priced"], total["unknown_attempts"], total["unpriced_attempts"]) == (
        cost,
        0,
        0,
    ), total


def test_requested_usage_reads_only_a_size_it_knows():
    from afc_cli.providers.fal import FalProvider

    fal = FalProvider()
    assert fal.requested_usage({"image_size": {"width": 2048, "height": 2048}}) == {
        "images": 1,
        "megapixels": 4,
    }
    assert fal.requested_usage({"image_size": "landscape_16_9", "num_images": 3}) == {
        "images": 3,
        "megapixels": 3,
    }
    # no size, a size it cannot read, a preset it does not know: no megapixels at all
    for params in (
        {},
        {"image_size": {"width": "2048", "height": 2048}},
        {"image_size": {"width": 0, "height": 2048}},
        {"image_size": "poster_9_16"},
        {"image_size": [2048, 2048]},
    ):
        assert fal.requested_usage(params) == {"images": 1}, params
