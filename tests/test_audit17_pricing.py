"""Two ways a paid answer was priced wrong or not at all, with nothing said (README "Rate
cards"): an image whose answer leaves out a token count the card prices, and a card naming
only prices its provider's answers never report a unit for."""

from __future__ import annotations

from decimal import Decimal

import pytest
from conftest import manifest

from afc_cli.costs import RateCards

FAST = {"base": 0.01, "cap": 0.05}
GEMINI = "gemini-2.5-flash-image"
TOKENS = {"per_1k_input_tokens": "0.005", "per_1k_output_tokens": "0.04"}


def cards(**prices: str) -> RateCards:
    return RateCards({("p", "m"): {k: Decimal(v) for k, v in prices.items()}})


def test_an_image_without_a_token_count_the_card_prices_is_not_priced_by_the_rest():
    """An image priced by its prompt's tokens alone was a fifth of a cent for a 4-cent image:
    the card's per-image price prices it, else it is unpriced; a refusal (no image) is still
    priced by the tokens it reports, which is what it is billed."""
    no_output = {"images": 1, "input_tokens": 50}
    assert cards(**TOKENS).price("p", "m", no_output) is None  # was 250 (50 x 0.005/1k)
    assert cards(per_image="0.04", **TOKENS).price("p", "m", no_output) == 40_000
    no_input = {"images": 1, "output_tokens": 4160}
    assert cards(per_image="0.04", **TOKENS).price("p", "m", no_input) == 40_000
    assert cards(**TOKENS).price("p", "m", {"input_tokens": 50}) == 250  # a refusal's prompt
    assert cards(**TOKENS).price("p", "m", {"images": 0, "input_tokens": 50}) == 250
    # a card pricing output tokens only still prices an answer that reports them alone
    assert cards(per_1k_output_tokens="0.04").price("p", "m", no_input) == 166_400


def run_gemini(afc, rate, prompts):
    data = manifest(
        [{"key": f"j{i}", "prompt": p} for i, p in enumerate(prompts)],
        rates=[{"provider": "gemini", "model": GEMINI, **rate}],
    )
    data["defaults"]["chain"] = [
        {"provider": "gemini", "model": GEMINI, "attempts": 1, "backoff": FAST}
    ]
    afc.write_manifest(data)
    run = afc.json("submit", "manifest.yaml")
    return {j["key"]: j["cost"] for j in run["jobs"]}, afc.json("costs", "report")["total"]


def test_a_gemini_image_whose_answer_leaves_out_its_output_tokens(afc, fake):
    costs, report = run_gemini(
        afc, {"per_image": "0.039", **TOKENS}, ("no-output-count a", "plain b")
    )
    # j1: 10 x 0.005/1k + 1290 x 0.04/1k by its tokens; j0 by its image (was 0.000050)
    assert costs == {"j0": "0.039000", "j1": "0.051650"}
    assert report["unpriced_attempts"] == 0


def test_without_a_per_image_price_such_an_image_is_unpriced_not_a_guess(afc, fake):
    costs, report = run_gemini(afc, TOKENS, ("no-output-count a",))
    assert costs == {"j0": None}
    assert report["unpriced_attempts"] == 1 and report["priced"] == "0.000000"


@pytest.mark.parametrize(
    ("card", "named", "usable"),
    [
        (
            {"provider": "fal", "model": "fal-ai/flux/dev", "per_second": "0.001"},
            "per_second",
            "per_image",
        ),
        (
            {"provider": "gemini", "model": GEMINI, "per_second": "0.001"},
            "per_second",
            "per_1k_input_tokens or per_1k_output_tokens or per_image",
        ),
        (
            {"provider": "openai", "model": "gpt-image-1", "per_second": "0.001"},
            "per_second",
            "per_1k_input_image_tokens or per_1k_input_tokens or per_1k_output_tokens or per_image",
        ),
    ],
)
def test_a_card_its_providers_answers_can_never_use_is_refused(afc, card, named, usable):
    """fal's answers report the images they made, nothing else: a per_second card for a fal
    model was accepted, and every attempt of it was recorded unpriced (under a budget the
    run stopped for want of a price it was given). Refused with the manifest's other
    problems, exit 2, nothing written."""
    data = manifest([{"key": "a", "prompt": "p"}], rates=[card])
    data["defaults"]["chain"] = [{"provider": card["provider"], "model": card["model"]}]
    afc.write_manifest(data)
    for command in (("plan", "manifest.yaml"), ("submit", "manifest.yaml")):
        result = afc(*command)
        assert result.returncode == 2, result.stderr
        assert (
            f"field 'rates[0]': {card['provider']}'s answers report no unit that {named} "
            f"prices, so every attempt would be unpriced: give {usable}"
        ) in result.stderr
    assert not list(afc.cwd.glob("*.db"))  # nothing written


@pytest.mark.parametrize(
    "card",
    [
        {"provider": "replicate", "model": "m", "per_second": "0.001"},
        {"provider": "local", "model": "m", "per_second": "0.001"},
        {"provider": "fal", "model": "m", "per_image": "0.03", "per_second": "0.001"},
        # both token rates: a card of one of them alone prices no Gemini image (its answers
        # report input and output tokens) and is refused (tests/test_audit32a_token_card.py)
        {
            "provider": "gemini",
            "model": "m",
            "per_1k_input_tokens": "0.0003",
            "per_1k_output_tokens": "0.03",
        },
    ],
)
def test_a_card_with_a_price_its_provider_can_use_is_accepted(afc, card):
    data = manifest([{"key": "a", "prompt": "p"}], rates=[card])
    afc.write_manifest(data)
    afc("plan", "manifest.yaml")
