"""A run past its budget by the attempts of models without a per-image price says so, not
that answers cost more than their reservations (outside audit 45a; README "Budget").

Under ``--allow-unpriced`` a model with no per-image price (a Replicate model billed per
second) reserves nothing: its attempts start while the run's spend is within the cap, and
their cost, known at the end, takes it past. The summary of such a run said 'answers cost
more than the estimates reserved for them (a card that charges tokens: give it a per_image
of at least what an image costs in tokens)': a per-second card has no tokens, and nothing
was reserved. It now says what happened, and what the option it was given means."""

from __future__ import annotations

from conftest import manifest


def test_a_run_past_its_cap_by_unpriced_models_says_so(afc, fake):
    data = manifest(
        [{"key": f"s{i:02d}", "prompt": f"shot {i}"} for i in range(12)],
        rates=[{"provider": "replicate", "model": "bfl/flux", "per_second": "0.01"}],
    )
    data["defaults"]["chain"] = [
        {"provider": "replicate", "model": "bfl/flux", "backoff": {"base": 0.01, "cap": 0.05}}
    ]
    afc.write_manifest(data)
    run = afc(
        "submit", "manifest.yaml", "--concurrency", "4", "--max-spend", "0.01", "--allow-unpriced"
    )
    assert run.returncode == 4, run.stderr
    spent = afc.rows("SELECT SUM(cost_micros) FROM attempts")[0][0]
    assert spent > 10_000  # the first wave of four, 0.025 USD each (2.5 s at 0.01)
    shown = f"{spent // 1_000_000}.{spent % 1_000_000:06d}"
    assert (
        f"this run spent {shown} USD, past its budget of 0.010000: {shown} USD of it was "
        "attempts of models without a per-image price, which reserve nothing "
        "(--allow-unpriced: their spend is not capped)"
    ) in run.stderr, run.stderr
    assert "answers cost more than the estimates" not in run.stderr
    assert "a card that charges tokens" not in run.stderr


def test_a_per_image_card_past_its_cap_is_not_told_of_tokens(afc, fake):
    """A fal model that returns (and bills) one image more than asked: its per-image card
    has no tokens to raise a per_image for; the summary says what cost more."""
    data = manifest(
        [
            {"key": f"s{i:02d}", "prompt": f"shot {i} extra-image", "params": {"num_images": 2}}
            for i in range(12)
        ],
        rates=[{"provider": "fal", "model": "fal-ai/flux/dev", "per_image": "0.025"}],
    )
    data["defaults"]["chain"] = [
        {"provider": "fal", "model": "fal-ai/flux/dev", "backoff": {"base": 0.01, "cap": 0.05}}
    ]
    afc.write_manifest(data)
    run = afc("submit", "manifest.yaml", "--concurrency", "12", "--max-spend", "0.20")
    assert run.returncode == 4, run.stderr
    # four calls reserved 0.05 each and cost 0.075: 0.30
    assert (
        "this run spent 0.300000 USD, past its budget of 0.200000: answers cost more than the "
        "estimates reserved for them (answers holding more images than asked for: each image "
        "is charged)"
    ) in run.stderr, run.stderr
    assert "a card that charges tokens" not in run.stderr
