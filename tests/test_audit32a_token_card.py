"""A rate card with a token rate but not both of the token rates an answer is priced by, and
nothing else its provider's answers can be priced by, prices none of the images it pays for
(outside audit 32a; README "Rate cards").

Tokens price an answer only where the card has a rate for each token count the answer reports
(``RateCards.price``), and OpenAI's and Gemini's image answers report both input and output
tokens. A card of ``per_1k_output_tokens`` alone (the rate that is nearly all of a gpt-image
or Gemini image's bill) was accepted, every image of the run was paid for and recorded
unpriced, and 'afc costs report' said 0.000000 priced: the card it was given priced nothing.
Such a card is refused with the manifest's other problems (exit 2, nothing written, no call),
as a card its provider's answers report no unit for is."""

from __future__ import annotations

import pytest
from conftest import manifest

GEMINI = "gemini-2.5-flash-image"


def write(afc, card):
    data = manifest([{"key": "a", "prompt": "a lighthouse"}], rates=[card])
    data["defaults"]["chain"] = [{"provider": card["provider"], "model": card["model"]}]
    afc.write_manifest(data)


@pytest.mark.parametrize(
    ("card", "named", "missing"),
    [
        (
            {"provider": "openai", "model": "gpt-image-1", "per_1k_output_tokens": "0.04"},
            "per_1k_output_tokens",
            "per_1k_input_tokens",
        ),
        (
            {
                "provider": "openai",
                "model": "gpt-image-1",
                "per_1k_input_image_tokens": "0.01",
                "per_1k_output_tokens": "0.04",
            },
            "per_1k_input_image_tokens and per_1k_output_tokens",
            "per_1k_input_tokens",
        ),
        (
            {"provider": "openai", "model": "gpt-image-1", "per_1k_input_image_tokens": "0.01"},
            "per_1k_input_image_tokens",
            "per_1k_input_tokens and per_1k_output_tokens",
        ),
        (
            {"provider": "gemini", "model": GEMINI, "per_1k_output_tokens": "0.03"},
            "per_1k_output_tokens",
            "per_1k_input_tokens",
        ),
        (
            {"provider": "gemini", "model": GEMINI, "per_1k_input_tokens": "0.0003"},
            "per_1k_input_tokens",
            "per_1k_output_tokens",
        ),
    ],
)
def test_a_card_pricing_only_part_of_the_tokens_is_refused(afc, fake, card, named, missing):
    write(afc, card)
    for command in (("plan", "manifest.yaml"), ("submit", "manifest.yaml")):
        result = afc(*command)
        assert result.returncode == 2, result.stdout + result.stderr
        assert (
            f"field 'rates[0]': {named} without {missing} prices none of "
            f"{card['provider']}'s images"
        ) in result.stderr
        assert f"give {missing}, or per_image" in result.stderr
    assert not list(afc.cwd.glob("*.db"))  # nothing written
    assert not [entry for entry in fake.log if entry[1] == card["provider"]]  # nothing paid


def test_such_a_card_in_the_afc_config_rate_file_is_refused_naming_the_file(afc):
    rates = afc.cwd / "rates.yaml"
    rates.write_text(
        "rates:\n  - {provider: openai, model: gpt-image-1, per_1k_output_tokens: '0.04'}\n"
    )
    data = manifest([{"key": "a", "prompt": "p"}])
    afc.write_manifest(data)
    result = afc("plan", "manifest.yaml", env={"AFC_CONFIG": str(rates)})
    assert result.returncode == 2, result.stdout + result.stderr
    assert "AFC_CONFIG rate file" in result.stderr
    assert "per_1k_output_tokens without per_1k_input_tokens prices none" in result.stderr


@pytest.mark.parametrize(
    "card",
    [
        # both token rates: every image priced by its tokens
        {
            "provider": "openai",
            "model": "gpt-image-1",
            "per_1k_input_tokens": "0.005",
            "per_1k_output_tokens": "0.04",
        },
        # one token rate beside per_image: an image is priced per image, a Gemini refusal
        # (its prompt's tokens alone) by its tokens
        {
            "provider": "gemini",
            "model": GEMINI,
            "per_1k_input_tokens": "0.0003",
            "per_image": "0.039",
        },
        {
            "provider": "openai",
            "model": "gpt-image-1",
            "per_1k_output_tokens": "0.04",
            "per_image": "0.17",
        },
        # a provider whose answers report no tokens: the per_image price is what prices it
        {"provider": "replicate", "model": "m", "per_image": "0.04", "per_1k_output_tokens": "0.1"},
    ],
)
def test_a_card_that_prices_its_images_is_accepted(afc, fake, card):
    write(afc, card)
    result = afc("plan", "manifest.yaml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_whole_token_card_prices_the_run_it_was_given_for(afc, fake):
    """The refused cards' counterpart: both token rates price each image by its tokens (the
    fake's gpt-image answer: 50 input tokens, 4160 output tokens)."""
    write(
        afc,
        {
            "provider": "openai",
            "model": "gpt-image-1",
            "per_1k_input_tokens": "0.005",
            "per_1k_output_tokens": "0.04",
        },
    )
    afc.json("submit", "manifest.yaml")
    total = afc.json("costs", "report")["total"]
    assert total["priced"] == "0.166650" and total["unpriced_attempts"] == 0
