"""Outside audit 62b: fal's models billed by resolution could only be priced per image.

fal bills its image models "per image or per megapixel of output, where higher resolutions
cost proportionally more" (fal's pricing documentation): flux/dev is 0.025 USD a megapixel,
each image's rounded up to whole megapixels of 1024 x 1024 pixels. Its answer gives each
image's ``width`` and ``height``, but a fal rate card could only say ``per_image`` (a card
naming ``per_megapixel`` was refused, exit 2): a 2048x2048 flux/dev render, billed 0.10, was
recorded, reported and reserved at 0.025, and a budget of 0.30 let twelve of them start (1.20
USD billed). A fal card may now give ``per_megapixel``: the answer's megapixels price it, and
``per_image`` stays the estimate a budget reserves until an answer shows the dearer cost."""

from __future__ import annotations

import pytest
from conftest import manifest

FLUX = "fal-ai/flux/dev"
CARD = {"provider": "fal", "model": FLUX, "per_megapixel": "0.025", "per_image": "0.025"}


def _fal_manifest(jobs: list[dict]) -> dict:
    return manifest(
        jobs,
        defaults={"chain": [{"provider": "fal", "model": FLUX, "attempts": 1}]},
        rates=[CARD],
    )


def test_a_fal_answer_is_priced_by_its_megapixels(afc, fake):
    afc.write_manifest(
        _fal_manifest(
            [
                {
                    "key": "big",
                    "prompt": "big",
                    "params": {"image_size": {"width": 2048, "height": 2048}},
                },
                {
                    "key": "wide",
                    "prompt": "wide",
                    "params": {"image_size": {"width": 1536, "height": 1024}},
                },
                {"key": "hd", "prompt": "hd", "params": {"image_size": "square_hd"}},
                {"key": "small", "prompt": "small", "params": {"image_size": "landscape_16_9"}},
            ]
        )
    )
    run = afc("submit", "manifest.yaml")
    assert run.returncode == 0, run.stderr
    costs = dict(
        afc.rows("SELECT j.key, a.cost_micros FROM attempts a JOIN jobs j ON j.id = a.job_id")
    )
    # 4, 2 (1.5 rounded up), 1 and 1 (0.56 rounded up) megapixels at 0.025
    assert costs == {"big": 100_000, "wide": 50_000, "hd": 25_000, "small": 25_000}
    report = afc.json("costs", "report")
    assert report["total"]["priced"] == "0.200000"
    assert report["total"]["unpriced_attempts"] == 0


def test_a_budget_learns_the_megapixel_cost_and_holds(afc, fake):
    """Five 2048x2048 renders under a budget of 0.30, one call at a time: the first reserves
    the card's per_image (0.025) and costs 0.10; the run then reserves 0.10 a call, and three
    renders fit the budget exactly (before: all five ran, each said to cost 0.025)."""
    big = {"image_size": {"width": 2048, "height": 2048}}
    afc.write_manifest(
        _fal_manifest([{"key": f"k{i}", "prompt": f"p{i}", "params": big} for i in range(5)])
    )
    run = afc("submit", "manifest.yaml", "--max-spend", "0.30", "--concurrency", "1")
    assert run.returncode == 4, run.stderr
    assert fake.counts["fal_submit"] == 3
    assert afc.rows("SELECT COUNT(*), SUM(cost_micros) FROM attempts") == [(3, 300_000)]


def test_megapixels_of_images_and_unpriced_without_their_sizes():
    from afc_cli.costs import RateCards
    from afc_cli.providers.fal import images_usage

    assert images_usage([{"width": 1024, "height": 1024}, {"width": 1025, "height": 1024}]) == {
        "images": 2,
        "megapixels": 3,
    }
    # one image without its size: no megapixels at all, never a part of them
    assert images_usage([{"width": 2048, "height": 2048}, {"url": "x"}]) == {"images": 2}
    assert images_usage([{"width": "2048", "height": 2048}]) == {"images": 1}
    cards = RateCards.from_json(
        [{"provider": "fal", "model": FLUX, "prices": {"per_megapixel": "0.025"}}]
    )
    assert cards.price("fal", FLUX, {"images": 1, "megapixels": 4}) == 100_000
    assert cards.price("fal", FLUX, {"images": 1}) is None  # unpriced, not 0
    assert cards.estimate("fal", FLUX) is None  # no per-image price: nothing to reserve


@pytest.mark.parametrize("provider", ["openai", "replicate", "gemini"])
def test_per_megapixel_is_refused_where_answers_give_no_size(afc, provider):
    afc.write_manifest(
        manifest(
            [{"key": "a", "prompt": "a"}],
            rates=[{"provider": provider, "model": "m", "per_megapixel": "0.025"}],
        )
    )
    refused = afc("plan", "manifest.yaml")
    assert refused.returncode == 2
    assert "per_megapixel prices" in refused.stderr, refused.stderr
