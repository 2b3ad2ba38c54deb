"""`afc plan` (= `afc submit --dry-run`) says what the submit would do with the money: the same
budget (--max-spend over the manifest's `budget`), the same refusal of unpriced models, and an
estimate that counts every image a request asks for (README "Money: know before you pay")."""

from __future__ import annotations

import base64
import json

import pytest
from conftest import manifest

FAST = {"base": 0.01, "cap": 0.05}


def test_plan_compares_the_estimate_with_the_manifests_budget(afc):
    """An outside audit: plan showed `budget: null` for a manifest with `budget: "0.10"` while
    the real submit stopped at it with exit 4."""
    afc.write_manifest(manifest([{"key": k, "prompt": k} for k in "abc"], budget="0.10"))
    planned = afc.json("plan", "manifest.yaml")
    assert planned["estimated_spend"] == "0.150000"
    assert planned["budget"] == "0.100000" and planned["fits_budget"] is False
    dry = afc.json("submit", "manifest.yaml", "--dry-run")
    assert dry["budget"] == "0.100000" and dry["fits_budget"] is False
    text = afc("plan", "manifest.yaml").stdout
    assert "budget 0.100000 USD: the estimate does NOT fit" in text
    # the option wins over the manifest's budget, as in the submit
    wider = afc.json("plan", "manifest.yaml", "--max-spend", "1")
    assert wider["budget"] == "1.000000" and wider["fits_budget"] is True
    assert not (afc.cwd / "afc.db").exists()
    assert afc("submit", "manifest.yaml").returncode == 4  # the budget the plan showed


def test_plan_refuses_what_the_submit_refuses_under_a_budget(afc):
    """An outside audit: `afc submit --dry-run --max-spend 1` said "the estimate fits" (exit 0)
    of a manifest whose fallback model has no rate card; the real submit refuses it (exit 2).
    The plan names every model of the chain without a per-image price, says the submit's
    refusal and exits 2; --allow-unpriced plans the submit that would run."""
    import json

    data = manifest([{"key": "a", "prompt": "a"}])
    data["defaults"]["chain"].append({"provider": "local", "model": "m2", "attempts": 1})
    afc.write_manifest(data)
    real = afc("submit", "manifest.yaml", "--max-spend", "1")
    assert real.returncode == 2 and not (afc.cwd / "afc.db").exists()
    refusal = real.stderr.strip().removeprefix("afc: ")
    for args in (("plan",), ("submit", "--dry-run")):
        dry = afc(*args, "manifest.yaml", "--max-spend", "1", "--json")
        assert dry.returncode == 2, (args, dry.stderr)
        planned = json.loads(dry.stdout)  # the plan is still shown
        assert planned["unpriced_models"] == ["local/m2"]
        assert planned["estimated_spend"] == "0.050000"
        assert planned["fits_budget"] is None and planned["problems"] == [refusal]
        assert "local/m2" in dry.stderr and "--allow-unpriced" in dry.stderr
        text = afc(*args, "manifest.yaml", "--max-spend", "1")
        assert text.returncode == 2
        assert "a submit would be refused (exit 2): " in text.stdout
        assert "budget 1.000000 USD: the estimate fits" not in text.stdout
        allowed = afc.json(*args, "manifest.yaml", "--max-spend", "1", "--allow-unpriced")
        assert allowed["problems"] == [] and allowed["fits_budget"] is True
        assert allowed["unpriced_models"] == ["local/m2"]
    # without a budget nothing is refused: the unpriced model is only named
    free = afc.json("plan", "manifest.yaml")
    assert free["problems"] == [] and free["unpriced_models"] == ["local/m2"]
    assert not (afc.cwd / "afc.db").exists()
    assert afc("submit", "manifest.yaml", "--max-spend", "1", "--allow-unpriced").returncode == 0


def test_plans_max_spend_help_says_what_plan_does_with_it(afc):
    """An outside audit: `afc plan -h` said --max-spend would "stop starting attempts before it
    (exit 4)", though a plan starts none."""
    text = afc("plan", "-h").stdout
    option = " ".join(text.split("--max-spend USD", 1)[1].split("--allow-unpriced")[0].split())
    assert "stop starting attempts" not in option and "exit 4" not in option
    assert "the estimate fits" in option and "manifest's budget" in option


@pytest.mark.parametrize(
    "provider, model, param",
    [
        ("openai", "gpt-image-1", "n"),
        ("replicate", "black-forest-labs/flux-schnell", "num_outputs"),
        ("fal", "fal-ai/flux/dev", "num_images"),
    ],
)
def test_the_estimate_counts_every_image_a_request_asks_for(afc, fake, provider, model, param):
    """An outside audit: with `n: 4` and a per_image card of 0.04, plan estimated 0.04 a job
    and the run was charged 0.16 a job (every image of an answer is billed); the same estimate
    was the budget's reservation, so a 0.10 budget let 0.16 and more through. Each provider's
    own image-count param counts, in the plan and in the reservation."""

    def write(name, batch):
        data = manifest(
            [{"key": f"j{i}", "prompt": f"prompt {i}"} for i in range(3)],
            batch=batch,
            rates=[{"provider": provider, "model": model, "per_image": "0.04"}],
        )
        data["defaults"]["chain"] = [
            {"provider": provider, "model": model, "attempts": 1, "backoff": FAST}
        ]
        data["defaults"]["params"] = {param: 4}
        afc.write_manifest(data, name)

    write("manifest.yaml", "b1")
    planned = afc.json("plan", "manifest.yaml")
    assert planned["estimated_spend"] == "0.480000"
    run = afc.json("submit", "manifest.yaml")
    assert run["spent"] == planned["estimated_spend"]  # the plan said what the run was charged
    # each attempt is reserved at its four images: under 0.10 none of them starts
    write("m2.yaml", "b2")
    assert afc.json("plan", "m2.yaml", "--max-spend", "0.10")["fits_budget"] is False
    capped = afc.json("submit", "m2.yaml", "--max-spend", "0.10", "--concurrency", "1", expect=4)
    assert capped["spent"] == "0.000000"
    started = afc.rows(
        "SELECT COUNT(*) FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE j.batch = 'b2'"
    )
    assert started == [(0,)]
    waiting = [j["waiting"] for j in capped["jobs"] if j["status"] == "waiting"]
    assert waiting and "the next attempt is estimated at 0.160000" in waiting[0]


def test_an_image_count_is_read_as_the_provider_would_take_it():
    """Whole numbers from 1 count (also "4" and 4.0, which a model's input may accept); any
    other value is the provider's default of one image (the provider refuses what it cannot
    read, unbilled); a provider without an image-count param always makes one image."""
    from afc_cli.costs import RateCards
    from afc_cli.providers import images_requested

    assert images_requested("openai", {"n": 3}) == 3
    assert images_requested("replicate", {"num_outputs": "2"}) == 2
    assert images_requested("fal", {"num_images": 4.0}) == 4
    for odd in (0, -2, 1.5, True, "many", None, [4], "NaN"):
        assert images_requested("openai", {"n": odd}) == 1, odd
    assert images_requested("openai", {}) == 1
    assert images_requested("gemini", {"n": 4}) == 1 and images_requested("local", {"n": 4}) == 1
    cards = RateCards.from_json(
        [{"provider": "openai", "model": "m", "prices": {"per_image": "0.04"}}]
    )
    assert cards.estimate("openai", "m", 4) == 160_000
    # an absurd count stays within what the ledger's reservation holds, and fits no budget
    huge = cards.estimate("openai", "m", images_requested("openai", {"n": 10**30}))
    assert huge == 999_999_999_999


def test_plan_says_what_this_environment_lacks_for_the_submit(afc):
    """An outside audit: `afc plan` of a manifest whose OpenAI key and webhook secret were not
    set said nothing of them (exit 0), and the submit it planned was refused (exit 2). The plan
    names the variables (never a value) in `environment`, on stdout as text and on stderr with
    --json, and still exits 0: a plan made where the submit is not (CI checking manifests) is
    not a failure."""
    data = manifest([{"key": "a", "prompt": "a"}])
    data["defaults"]["chain"] = [{"provider": "openai", "model": "gpt-image-1"}]
    data["rates"] = [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}]
    data["webhook"] = {"url": "https://hooks.example.com/afc", "secret_env": "AFC_HOOK_SECRET"}
    afc.write_manifest(data)
    submit = afc("submit", "manifest.yaml", env={"OPENAI_API_KEY": ""})
    assert submit.returncode == 2
    bad_key = "sk-live-123\nX-Leak: 1"  # a value no header can carry: named, never shown
    for env in ({"OPENAI_API_KEY": ""}, {"OPENAI_API_KEY": bad_key}):
        planned = afc("plan", "manifest.yaml", "--json", env=env)
        assert planned.returncode == 0, planned.stderr
        lacks = json.loads(planned.stdout)["environment"]
        assert len(lacks) == 2 and "OPENAI_API_KEY" in lacks[0], lacks
        assert "manifest.yaml: field 'webhook.secret_env'" in lacks[1]
        assert "AFC_HOOK_SECRET" in lacks[1]
        for line in lacks:
            assert f"a submit in this environment would be refused (exit 2): {line}" in (
                planned.stderr
            )
        assert "sk-live" not in planned.stdout + planned.stderr
        text = afc("plan", "manifest.yaml", env=env)
        assert text.returncode == 0
        assert text.stdout.count("a submit in this environment would be refused (exit 2)") == 2
    secret = "whsec_" + base64.b64encode(b"k" * 32).decode()
    ready = afc.json(
        "plan", "manifest.yaml", env={"OPENAI_API_KEY": "sk-1", "AFC_HOOK_SECRET": secret}
    )
    assert ready["environment"] == [] and ready["problems"] == []
    assert not (afc.cwd / "afc.db").exists()
