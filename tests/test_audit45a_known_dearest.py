"""A resume under a budget reserves, from its first call, what the ledger's answers of a
token-priced model already cost (outside audit 45a; README "Budget").

A card that charges tokens keeps ``per_image`` as its estimate, and a gpt-image answer of
4,160 output tokens costs 0.16665 USD against a ``per_image`` of 0.04. Once one such answer
is known the run reserves the dearer cost, "so only the calls already in flight before the
first such answer can take the spend past the cap". But the cost was learnt from the run's
own answers only: each ``afc resume --max-spend`` sent a first wave reserving 0.04 a call
again, though the ledger held the earlier run's answers, and every resume spent four times
its cap (0.50 USD: 2.00 USD, twelve calls). It now starts from those answers, priced again by
the batch's card as it is now (a cheaper card admitted since lets more calls in)."""

from __future__ import annotations

from conftest import ledger_count, manifest

CARD = {
    "provider": "openai",
    "model": "gpt-image-1",
    "per_image": "0.04",
    "per_1k_input_tokens": "0.005",
    "per_1k_output_tokens": "0.04",
}
# the fake's answer: 50 input and 4,160 output tokens, 0.166650 USD by CARD
PRICE = 166650


def write(afc, card):
    data = manifest(
        [{"key": f"s{i:02d}", "prompt": f"shot {i}"} for i in range(30)],
        rates=[card],
    )
    data["defaults"]["chain"] = [
        {"provider": "openai", "model": "gpt-image-1", "backoff": {"base": 0.01, "cap": 0.05}}
    ]
    afc.write_manifest(data)


def priced(afc) -> int:
    """The ledger's priced spend in micro-USD, as ``afc costs report`` sums it."""
    total = afc.json("costs", "report")["total"]["priced"]
    whole, frac = total.split(".")
    return int(whole) * 1_000_000 + int(frac)


def test_a_resume_reserves_what_earlier_answers_of_its_token_card_cost(afc, fake, ledger_url):
    afc.env["AFC_LEDGER"] = ledger_url
    write(afc, CARD)
    first = afc("submit", "manifest.yaml", "--concurrency", "30", "--max-spend", "0.50")
    assert first.returncode == 4, first.stderr
    # the first run knew nothing of the answers' cost: its first wave is the documented excess
    # (12 calls at 0.04 USD, fewer when an answer came back before the twelfth started: a
    # loaded machine's timing)
    wave = sum(1 for entry in fake.log if entry[3])
    assert 3 <= wave <= 12
    before = priced(afc)
    assert before == wave * PRICE
    resumed = afc("resume", "--concurrency", "30", "--max-spend", "0.50")
    assert resumed.returncode == 4, resumed.stderr
    # three calls at the price the ledger knew fit 0.50 USD; four would not
    assert priced(afc) - before == 3 * PRICE, resumed.stderr
    assert "this run spent 0.499950 USD (priced)" in resumed.stderr
    assert "past its budget" not in resumed.stderr
    assert sum(1 for entry in fake.log if entry[3]) == wave + 3


def test_a_card_changed_since_prices_the_earlier_answers_as_now(afc, fake):
    write(afc, CARD)
    first = afc("submit", "manifest.yaml", "--concurrency", "30", "--max-spend", "0.50")
    assert first.returncode == 4, first.stderr
    before = afc.rows("SELECT COALESCE(SUM(cost_micros), 0) FROM attempts")[0][0]
    # the card's output rate halved: an answer now costs 0.0002500 + 0.08320 = 0.083450
    write(afc, {**CARD, "per_1k_output_tokens": "0.02"})
    again = afc("submit", "manifest.yaml", "--concurrency", "30", "--max-spend", "0.50")
    assert again.returncode == 4, again.stderr
    after = afc.rows("SELECT COALESCE(SUM(cost_micros), 0) FROM attempts")[0][0]
    # five at the new price fit (0.417250), not the three the old price would have let in
    assert after - before == 5 * 83450, again.stderr


def test_a_resume_reserves_what_answers_with_more_images_than_asked_cost(afc, fake):
    """A fal model that returns (and bills) one image more than ``num_images`` asks: a
    per-image card prices three images where two were reserved."""
    data = manifest(
        [
            {"key": f"s{i:02d}", "prompt": f"shot {i} extra-image", "params": {"num_images": 2}}
            for i in range(30)
        ],
        rates=[{"provider": "fal", "model": "fal-ai/flux/dev", "per_image": "0.025"}],
    )
    data["defaults"]["chain"] = [
        {"provider": "fal", "model": "fal-ai/flux/dev", "backoff": {"base": 0.01, "cap": 0.05}}
    ]
    afc.write_manifest(data)
    first = afc("submit", "manifest.yaml", "--concurrency", "30", "--max-spend", "0.50")
    assert first.returncode == 4, first.stderr
    before = afc.rows("SELECT COALESCE(SUM(cost_micros), 0) FROM attempts")[0][0]
    assert before == 10 * 75000  # ten calls reserved 0.05 each and cost 0.075
    resumed = afc("resume", "--concurrency", "30", "--max-spend", "0.50")
    assert resumed.returncode == 4, resumed.stderr
    after = afc.rows("SELECT COALESCE(SUM(cost_micros), 0) FROM attempts")[0][0]
    assert after - before == 6 * 75000, resumed.stderr  # 0.450000; a seventh would not fit
    assert "past its budget" not in resumed.stderr


def test_a_worker_reserves_what_earlier_answers_of_its_claims_cost(afc, fake):
    """A worker started each night under a new budget name met the same first wave."""
    write(afc, CARD)
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    worker = ("worker", "--until-idle", "--concurrency", "30", "--max-spend", "0.50")
    first = afc(*worker, "--budget", "night-1")
    assert first.returncode == 4, first.stderr
    before = afc.rows("SELECT COALESCE(SUM(cost_micros), 0) FROM attempts")[0][0]
    assert before == 12 * PRICE
    second = afc(*worker, "--budget", "night-2")
    assert second.returncode == 4, second.stderr
    after = afc.rows("SELECT COALESCE(SUM(cost_micros), 0) FROM attempts")[0][0]
    assert after - before == 3 * PRICE, second.stderr


def test_a_plan_estimates_what_earlier_answers_of_its_token_card_cost(afc, fake, ledger_url):
    """``afc plan`` estimates each render at what the run reserves for it: the batch's known
    dearer cost, not the card's ``per_image``. It said the 18 jobs left, at 0.04 USD, came to
    0.72 USD and that a 0.73 USD budget fitted, where the run stops after four of them."""
    afc.env["AFC_LEDGER"] = ledger_url
    write(afc, CARD)
    first = afc("submit", "manifest.yaml", "--concurrency", "30", "--max-spend", "0.50")
    assert first.returncode == 4, first.stderr
    # the first wave's size is the run's timing (12 calls at 0.04 before the first answer)
    left = 30 - ledger_count(afc, ledger_url, "SELECT COUNT(*) FROM attempts WHERE cost_micros > 0")
    assert left >= 18
    # a budget the card's estimate fits, and the known cost does not
    cap = f"{left * 0.04 + 0.01:.2f}"
    planned = afc.json("plan", "manifest.yaml", "--max-spend", cap)
    assert planned["to_render"] == left
    assert planned["estimated_spend"] == f"{left * PRICE / 1_000_000:.6f}"  # 2.999700 for 18
    assert planned["fits_budget"] is False
    # a card changed since prices the earlier answers as now, as the run does
    write(afc, {**CARD, "per_1k_output_tokens": "0.02"})
    cheaper = afc.json("plan", "manifest.yaml")
    assert cheaper["estimated_spend"] == f"{left * 83450 / 1_000_000:.6f}"
    # a fresh batch knows no answer yet: the card's estimate
    data = manifest([{"key": "new", "prompt": "p"}], rates=[CARD], batch="b2")
    data["defaults"]["chain"] = [{"provider": "openai", "model": "gpt-image-1"}]
    afc.write_manifest(data, "fresh.yaml")
    assert afc.json("plan", "fresh.yaml")["estimated_spend"] == "0.040000"
