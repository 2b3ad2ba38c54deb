"""`afc plan` (= `afc submit --dry-run`) says what the submit would do with the money: the same
budget (--max-spend over the manifest's `budget`), the same refusal of unpriced models, and an
estimate that counts every image a request asks for (README "Money: know before you pay")."""

from __future__ import annotations

from conftest import manifest


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
