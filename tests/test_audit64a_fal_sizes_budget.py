"""Outside audit 64a: under a budget, one large fal render made every later smaller render of
the model reserve the large one's price.

A budget reserves, for each call, the dearest cost per image asked for that the model's answers
have shown in the run or the ledger (``pipeline.estimate_for``, ``dearest``). Audit 63d made a
fal request that says its ``image_size`` estimated by its megapixels under a card with
``per_megapixel``, but the dearest known cost stayed per image: once a 2048x2048 render had
cost 0.10, each 1024x1024 render of the model (0.025) reserved 0.10, four times its price.
Measured: one 2048x2048 and four 1024x1024 flux/dev renders (0.20 in all) under --max-spend
0.20, one at a time: the run stopped at exit 4 with 0.125 spent and three jobs never sent,
and ``afc plan`` of the batch estimated its remaining renders at 0.10 each. Now a request
whose megapixels are known learns and reserves the dearest cost per megapixel asked for: the
same run spends 0.20 and renders all five, exit 0."""

from __future__ import annotations

from conftest import manifest

FLUX = "fal-ai/flux/dev"
CARD = {"provider": "fal", "model": FLUX, "per_megapixel": "0.025", "per_image": "0.025"}


def _sized(side: int) -> dict:
    return {"image_size": {"width": side, "height": side}}


def test_a_large_render_does_not_make_the_small_ones_reserve_its_price(afc, fake):
    jobs = [{"key": "big", "prompt": "big", "params": _sized(2048)}] + [
        {"key": f"small{i}", "prompt": f"small {i}", "params": _sized(1024)} for i in range(4)
    ]
    afc.write_manifest(
        manifest(
            jobs,
            defaults={"chain": [{"provider": "fal", "model": FLUX, "attempts": 1}]},
            rates=[CARD],
        )
    )
    run = afc("submit", "manifest.yaml", "--max-spend", "0.20", "--concurrency", "1")
    assert "Traceback" not in run.stderr, run.stderr
    assert afc.rows("SELECT COUNT(*), SUM(cost_micros) FROM attempts") == [(5, 200_000)], run.stderr
    assert run.returncode == 0, run.stderr
    assert fake.counts["fal_submit"] == 5


def test_the_plan_estimates_small_renders_at_their_own_price_after_a_large_one(afc, fake):
    afc.write_manifest(
        manifest(
            [{"key": "big", "prompt": "big", "params": _sized(2048)}],
            defaults={"chain": [{"provider": "fal", "model": FLUX, "attempts": 1}]},
            rates=[CARD],
        )
    )
    assert afc("submit", "manifest.yaml").returncode == 0
    afc.write_manifest(
        manifest(
            [{"key": "big", "prompt": "big", "params": _sized(2048)}]
            + [
                {"key": f"small{i}", "prompt": f"small {i}", "params": _sized(1024)}
                for i in range(4)
            ],
            defaults={"chain": [{"provider": "fal", "model": FLUX, "attempts": 1}]},
            rates=[CARD],
        )
    )
    plan = afc.json("plan", "manifest.yaml", "--max-spend", "0.10")
    assert plan["estimated_spend"] == "0.100000", plan  # was 0.400000
    assert plan["fits_budget"] is True, plan
