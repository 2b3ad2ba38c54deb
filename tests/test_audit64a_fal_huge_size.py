"""Outside audit 64a: a fal job whose ``image_size`` is huge stopped ``afc plan`` and
``afc submit --max-spend`` as a bug in afc.

Audit 63d estimates a fal request that says its size at the card's ``per_megapixel`` times its
megapixels (``RateCards.estimate``). The manifest takes an integer side up to 2**53 - 1 (the
JSON-safe range), and a side of 9,007,199,254,740,991 made some 7.7e25 megapixels: their price
in micro-USD, some 30 digits, was more than Python's decimal context rounds to a whole number,
and the estimate raised ``decimal.InvalidOperation`` before its bound was applied ('afc:
unexpected error: InvalidOperation ... (a bug in afc)', exit 1). Now an estimate of 1,000,000
USD or more is the bound (999,999.999999 USD), as an absurd image count's is: the plan says
the budget is not met, and a submit under a budget refuses the job's call, nothing sent."""

from __future__ import annotations

from conftest import manifest

FLUX = "fal-ai/flux/dev"
CARD = {"provider": "fal", "model": FLUX, "per_megapixel": "0.025", "per_image": "0.025"}
SIDE = 2**53 - 1  # the largest integer a manifest's params take


def _huge(afc) -> None:
    afc.write_manifest(
        manifest(
            [
                {
                    "key": "k0",
                    "prompt": "p0",
                    "params": {"image_size": {"width": SIDE, "height": SIDE}},
                }
            ],
            defaults={"chain": [{"provider": "fal", "model": FLUX, "attempts": 1}]},
            rates=[CARD],
        )
    )


def test_a_huge_fal_size_is_estimated_at_the_bound(afc, fake):
    _huge(afc)
    plan = afc("plan", "manifest.yaml", "--max-spend", "1", "--json")
    assert plan.returncode == 0, plan.stderr
    assert "unexpected error" not in plan.stderr, plan.stderr
    data = afc.json("plan", "manifest.yaml", "--max-spend", "1")
    assert data["estimated_spend"] == "999999.999999", data
    assert data["fits_budget"] is False, data
    run = afc("submit", "manifest.yaml", "--max-spend", "1")
    assert "unexpected error" not in run.stderr, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    assert run.returncode == 4, run.stderr
    assert fake.counts["fal_submit"] == 0, "nothing sent past the budget"


def test_the_estimate_of_a_huge_size_is_bounded():
    from afc_cli.costs import MAX_ESTIMATE, RateCards
    from afc_cli.providers import megapixels_requested

    prices = {"per_megapixel": "0.025", "per_image": "0.025"}
    cards = RateCards.from_json([{"provider": "fal", "model": FLUX, "prices": prices}])
    size = {"image_size": {"width": SIDE, "height": SIDE}}
    megapixels = megapixels_requested("fal", size)
    assert cards.estimate("fal", FLUX, 1, megapixels) == MAX_ESTIMATE
    assert cards.estimate("fal", FLUX, 1, 40_000_000) == MAX_ESTIMATE  # exactly 1,000,000 USD
    assert cards.estimate("fal", FLUX, 1, 39_999_999) == 999_999_975_000
