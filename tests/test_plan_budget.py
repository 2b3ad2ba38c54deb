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
