"""A model with no per-image price that a budget refuses is said to be unpriced, never
'estimated at 0.000000' (outside audit 32a; README "Budget").

Under ``--allow-unpriced`` a model without a per-image price reserves nothing: it runs while
the run's spend is within its cap, and is refused once answers that cost more than their
estimates (a card that charges tokens) have taken the spend past it. The waiting job then
said 'the next attempt is estimated at 0.000000' of a model whose cost afc cannot know: an
unknown figure shown as zero, where everything else shows it as unpriced, and a reason that
read as 'it would cost nothing, yet it was refused'."""

from __future__ import annotations

from conftest import manifest

THINKING = "gemini-3-pro-image"
CARD = {
    "provider": "gemini",
    "model": THINKING,
    "per_image": "0.039",
    "per_1k_input_tokens": "0.0003",
    "per_1k_output_tokens": "0.03",
}


def test_an_unpriced_model_the_budget_refuses_is_said_unpriced(afc, fake):
    # the thinking answer costs 0.044703 in tokens (10 x 0.0003/1k + 1490 x 0.03/1k), past
    # the 0.04 cap its 0.039 estimate fitted; then the fal model, no card, is refused
    data = manifest(
        [
            {"key": "g1", "prompt": "thinking g1"},
            {
                "key": "u1",
                "prompt": "u1",
                "chain": [{"provider": "fal", "model": "fal-ai/flux/schnell"}],
                "needs": ["g1"],
            },
        ],
        rates=[CARD],
    )
    data["defaults"]["chain"] = [{"provider": "gemini", "model": THINKING}]
    afc.write_manifest(data)
    run = afc.json("submit", "manifest.yaml", "--max-spend", "0.04", "--allow-unpriced", expect=4)
    assert run["spent"] == "0.044703"
    waiting = {job["key"]: job["waiting"] for job in run["jobs"]}["u1"]
    assert waiting == (
        "budget: this run has spent or reserved 0.044703 of 0.040000 USD; the next attempt "
        "is unpriced (fal/fal-ai/flux/schnell has no per-image price)"
    )
    assert "0.000000" not in waiting
    assert not [entry for entry in fake.log if entry[1] == "fal"]  # never called
    shown = afc("status", "--status", "waiting")
    assert "the next attempt is unpriced" in shown.stdout, shown.stdout


def test_a_priced_model_the_budget_refuses_keeps_its_estimate(afc, fake):
    data = manifest(
        [
            {"key": "g1", "prompt": "thinking g1"},
            {"key": "g2", "prompt": "thinking g2", "needs": ["g1"]},
        ],
        rates=[CARD],
    )
    data["defaults"]["chain"] = [{"provider": "gemini", "model": THINKING}]
    afc.write_manifest(data)
    run = afc.json("submit", "manifest.yaml", "--max-spend", "0.04", expect=4)
    waiting = {job["key"]: job["waiting"] for job in run["jobs"]}["g2"]
    # the dearer cost its model's first answer had (README "Budget")
    assert waiting.endswith("the next attempt is estimated at 0.044703"), waiting
