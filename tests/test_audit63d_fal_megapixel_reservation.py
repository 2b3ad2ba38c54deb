"""Audit 63d: a budget over fal's models billed by resolution reserved per_image for every
call that started before the first answer came back.

A fal card may give ``per_megapixel`` (audit 62b): its answers are charged by their images'
megapixels, and ``per_image`` stays the estimate a budget reserves until an answer shows a
dearer cost. But fal's request says the size it asks for (``image_size``), and the calls that
start together reserve before any answer: five 2048x2048 flux/dev renders (0.10 each) under
--max-spend 0.30 at --concurrency 8 all started, each reserving 0.025, and the run spent
0.50 -- past its cap, exit 0, blaming 'answers holding more images than asked for' -- and
``afc plan`` estimated 0.125 and said it fit. 62b's test ran one call at a time. Now a
request that says its size is estimated at the card's per_megapixel times its megapixels
(rounded up as fal bills them) where that is dearer than per_image."""

from __future__ import annotations

from conftest import manifest

FLUX = "fal-ai/flux/dev"
CARD = {"provider": "fal", "model": FLUX, "per_megapixel": "0.025", "per_image": "0.025"}
BIG = {"image_size": {"width": 2048, "height": 2048}}


def _five_big(afc) -> None:
    afc.write_manifest(
        manifest(
            [{"key": f"k{i}", "prompt": f"p{i}", "params": BIG} for i in range(5)],
            defaults={"chain": [{"provider": "fal", "model": FLUX, "attempts": 1}]},
            rates=[CARD],
        )
    )


def test_a_budget_holds_for_fal_renders_started_together(afc, fake):
    _five_big(afc)
    plan = afc.json("plan", "manifest.yaml", "--max-spend", "0.30")
    assert plan["estimated_spend"] == "0.500000", plan
    assert plan["fits_budget"] is False, plan
    run = afc("submit", "manifest.yaml", "--max-spend", "0.30", "--concurrency", "8")
    assert run.returncode == 4, run.stderr
    assert fake.counts["fal_submit"] == 3
    assert afc.rows("SELECT COUNT(*), SUM(cost_micros) FROM attempts") == [(3, 300_000)]


def test_the_megapixels_a_fal_request_asks_for():
    from afc_cli.costs import RateCards
    from afc_cli.providers import megapixels_requested

    def asks(**params):
        return megapixels_requested("fal", params)

    assert asks(image_size={"width": 2048, "height": 2048}) == 4
    assert asks(image_size={"width": 1536, "height": 1024}, num_images=3) == 6  # 1.5 -> 2
    assert asks(image_size="square_hd") == 1
    assert asks(image_size="landscape_16_9", num_images=2) == 2
    assert asks() is None  # the model's default size: per_image estimates it
    assert asks(image_size="huge") is None
    assert asks(image_size={"width": "2048", "height": 2048}) is None
    assert asks(image_size={"width": 2048}) is None
    assert megapixels_requested("openai", {"size": "1024x1024"}) is None
    prices = {"per_megapixel": "0.025", "per_image": "0.025"}
    cards = RateCards.from_json([{"provider": "fal", "model": FLUX, "prices": prices}])
    assert cards.estimate("fal", FLUX, 1, 4) == 100_000
    assert cards.estimate("fal", FLUX, 1, None) == 25_000
    assert cards.estimate("fal", FLUX, 2, 1) == 50_000  # per_image the dearer
    only_mp = RateCards.from_json(
        [{"provider": "fal", "model": FLUX, "prices": {"per_megapixel": "0.025"}}]
    )
    assert only_mp.estimate("fal", FLUX, 1, 4) is None  # no per-image price: as before
