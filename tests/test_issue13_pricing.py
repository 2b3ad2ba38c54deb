"""The one pricing rule (README "Rate cards"): tokens when the card prices every reported
token count, else per_image x images produced, else per_second x seconds; unpriced only when
no reported unit has a rate. Unit tests for the rule, then real runs against the fake
provider servers."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from conftest import manifest
from hypothesis import given, settings
from hypothesis import strategies as st

from afc_cli.costs import RateCards

FAST = {"base": 0.01, "cap": 0.05}
MODELS = {
    "openai": "gpt-image-1",
    "replicate": "black-forest-labs/flux-1.1-pro",
    "fal": "fal-ai/flux/dev",
    "gemini": "gemini-2.5-flash-image",
}
TOKENS = {"per_1k_input_tokens": "0.005", "per_1k_output_tokens": "0.04"}


def cards(**prices: str) -> RateCards:
    return RateCards({("p", "m"): {k: Decimal(v) for k, v in prices.items()}})


def test_tokens_win_when_the_card_prices_every_reported_count():
    usage = {"images": 1, "input_tokens": 50, "output_tokens": 4160}
    assert cards(**TOKENS).price("p", "m", usage) == 166_650
    assert cards(per_image="0.04", **TOKENS).price("p", "m", usage) == 166_650


def test_per_image_prices_an_answer_that_also_reports_tokens():
    usage = {"images": 1, "input_tokens": 50, "output_tokens": 4160}
    assert cards(per_image="0.04").price("p", "m", usage) == 40_000
    # a card that can price only part of the tokens does not price the tokens at all
    assert cards(per_image="0.04", per_1k_input_tokens="0.005").price("p", "m", usage) == 40_000
    assert cards(per_1k_input_tokens="0.005").price("p", "m", usage) is None
    assert cards(per_image="0.04").price("p", "m", {**usage, "images": 3}) == 120_000


def test_per_image_before_per_second_and_seconds_last():
    usage = {"images": 1, "seconds": 3.2}
    assert cards(per_image="0.04", per_second="0.0012").price("p", "m", usage) == 40_000
    assert cards(per_second="0.0012").price("p", "m", usage) == 3_840
    assert cards(per_second="0.0012").price("p", "m", {"images": 1}) is None


def test_unpriced_only_when_no_reported_unit_has_a_rate():
    assert cards(per_image="0.04").price("p", "m", {"seconds": 1.5}) is None
    assert cards(per_image="0.04").price("p", "m", {}) is None
    assert cards(per_image="0.04").price("p", "other", {"images": 1}) is None
    assert cards(per_image="0.04").price("p", "m", {"images": 0}) == 0  # reported: nothing made


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats()
    | st.text(alphabet="0123456789.-+eEinfaNs x", max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=5,
)
UNITS = ("images", "seconds", "input_tokens", "output_tokens")


@settings(max_examples=500, deadline=None)
@given(
    usage=st.dictionaries(st.sampled_from(UNITS), JSON_VALUES),
    prices=st.dictionaries(
        st.sampled_from(["per_image", "per_second", *TOKENS]),
        st.decimals(min_value=0, max_value=999_999, places=6),
    ),
)
def test_a_providers_usage_never_breaks_the_pricing(usage, prices):
    """Usage comes from a provider's answer, after the call was paid for: whatever it holds,
    the rule prices it (micro-USD from 0 up to the ledger's 1,000,000 USD) or leaves it
    unpriced; it never raises, which lost the paid output and stopped the run."""
    cost = RateCards({("p", "m"): prices}).price("p", "m", usage)
    assert cost is None or (isinstance(cost, int) and 0 <= cost < 10**12)


def test_unreadable_counts_count_as_not_reported():
    tokens = cards(per_image="0.04", **TOKENS)
    # one unreadable token count: the tokens price nothing (half would be a guess), images do
    assert tokens.price(
        "p", "m", {"images": 1, "input_tokens": "fifty", "output_tokens": 4160}
    ) == (40_000)
    assert tokens.price("p", "m", {"images": 1, "output_tokens": float("nan")}) == 40_000
    assert cards(**TOKENS).price("p", "m", {"images": 1, "input_tokens": -5}) is None
    assert cards(per_second="0.001").price("p", "m", {"seconds": "12.5"}) == 12_500
    assert cards(per_second="0.001").price("p", "m", {"seconds": True}) is None
    assert cards(per_image="999999").price("p", "m", {"images": 2}) is None  # >= 1,000,000 USD


def test_an_openai_answer_with_unreadable_usage_is_kept_and_priced_by_its_images(afc, fake):
    """A paid OpenAI answer whose token counts are a word and NaN: the image is stored, the
    job succeeds, the attempt keeps the usage as the provider sent it (the NaN as text, so the
    ledger and ``--json`` stay valid JSON) and is priced by the card's per-image rate (with
    tokens alone it would be unpriced, never a guessed zero)."""
    planned, run, report = run_priced(
        afc, "openai", {"per_image": "0.04", **TOKENS}, prompts=("odd-usage one", "a")
    )
    assert {j["key"]: j["cost"] for j in run["jobs"]} == {"j0": "0.040000", "j1": "0.166650"}
    assert [j["status"] for j in run["jobs"]] == ["succeeded", "succeeded"]
    shown = afc("show", "j0", "--json").stdout
    # strict JSON for scripts (jq refuses NaN): the NaN count is kept as its text
    attempt = json.loads(shown, parse_constant=pytest.fail)["attempts"][0]
    assert attempt["usage"]["input_tokens"] == "fifty"
    assert attempt["usage"]["output_tokens"] == "nan"
    assert attempt["cost"] == "0.040000" and attempt["cost_source"] == "derived"
    assert (afc.outputs() / "b1" / "j0.png").read_bytes().startswith(b"\x89PNG")


def run_priced(afc, provider, rate, prompts=("a", "b", "c")):
    data = manifest(
        [{"key": f"j{i}", "prompt": p} for i, p in enumerate(prompts)],
        rates=[{"provider": provider, "model": MODELS[provider], **rate}],
    )
    data["defaults"]["chain"] = [
        {"provider": provider, "model": MODELS[provider], "attempts": 2, "backoff": FAST}
    ]
    afc.write_manifest(data)
    planned = afc.json("plan", "manifest.yaml")
    run = afc.json("submit", "manifest.yaml")
    report = afc.json("costs", "report")["total"]
    return planned, run, report


def test_openai_with_a_per_image_card_is_priced_as_planned(afc, fake):
    planned, run, report = run_priced(afc, "openai", {"per_image": "0.04"})
    assert planned["estimated_spend"] == "0.120000" and planned["unpriced_models"] == []
    assert report["priced"] == "0.120000" and report["unpriced_attempts"] == 0
    assert run["spent"] == "0.120000"
    assert {j["cost"] for j in run["jobs"]} == {"0.040000"}
    attempt = afc.json("show", "j0")["attempts"][0]
    assert attempt["usage"] == {"images": 1, "input_tokens": 50, "output_tokens": 4160}
    assert attempt["cost"] == "0.040000" and attempt["cost_source"] == "derived"


def test_openai_with_a_token_card(afc, fake):
    planned, run, report = run_priced(afc, "openai", TOKENS)
    assert planned["estimated_spend"] == "0.000000"
    assert planned["unpriced_models"] == ["openai/gpt-image-1"]  # tokens: not known before
    assert report["priced"] == "0.499950"  # 3 x (50 x 0.005/1k + 4160 x 0.04/1k)
    assert run["spent"] == "0.499950"


def test_openai_with_both_prices_the_tokens_and_plans_per_image(afc, fake):
    planned, run, report = run_priced(afc, "openai", {"per_image": "0.04", **TOKENS})
    assert planned["estimated_spend"] == "0.120000"
    assert report["priced"] == "0.499950" and report["unpriced_attempts"] == 0
    assert run["spent"] == "0.499950"


@pytest.mark.parametrize("provider", ["replicate", "fal", "gemini"])
def test_a_per_image_card_prices_every_provider_as_planned(afc, fake, provider):
    planned, run, report = run_priced(afc, provider, {"per_image": "0.03"}, prompts=("a", "b"))
    assert planned["estimated_spend"] == "0.060000"
    assert report["priced"] == planned["estimated_spend"]
    assert report["unpriced_attempts"] == 0
    assert run["spent"] == planned["estimated_spend"]


def test_gemini_thinking_tokens_are_priced_as_output(afc, fake):
    """Gemini reports a thinking model's thoughts in ``thoughtsTokenCount``, apart from (not
    inside) ``candidatesTokenCount``, and bills them as output tokens. Leaving them out
    priced such an answer below its bill: here 10 input and 1290 + 200 output tokens, so
    10 x 0.005/1k + 1490 x 0.04/1k = 0.05965, where the candidates alone made 0.05165. A
    refusal that thought before it refused is billed its thoughts as well."""
    data = manifest(
        [
            {"key": f"j{i}", "prompt": p}
            for i, p in enumerate(("thinking a", "thinking image-safety b", "plain c"))
        ],
        rates=[{"provider": "gemini", "model": MODELS["gemini"], **TOKENS}],
    )
    data["defaults"]["chain"] = [
        {"provider": "gemini", "model": MODELS["gemini"], "attempts": 1, "backoff": FAST}
    ]
    afc.write_manifest(data)
    run = afc.json("submit", "manifest.yaml", expect=1)  # j1 refused
    assert {j["key"]: j["cost"] for j in run["jobs"]} == {
        "j0": "0.059650",
        "j1": "0.059650",
        "j2": "0.051650",
    }
    attempt = afc.json("show", "j0")["attempts"][0]
    assert attempt["usage"] == {
        "images": 1,
        "input_tokens": 10,
        "output_tokens": 1490,
        "thoughts_tokens": 200,
    }
    assert afc.json("show", "j1")["attempts"][0]["usage"]["output_tokens"] == 1490
    assert afc.json("costs", "report")["total"]["priced"] == run["spent"] == "0.170950"
