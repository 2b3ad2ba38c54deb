"""Audit 19 (c), money: what a budget lets start and what the commands say a job cost, through
the real ``afc`` command (the local provider)."""

from __future__ import annotations

from conftest import manifest


def test_a_budget_below_one_micro_usd_is_not_rounded_up_past_what_was_given(afc):
    """``--max-spend 0.0000005`` was rounded half-up to a cap of 0.000001 USD (the plan said
    "budget 0.000001 USD: the estimate fits"), so a call priced 0.000001 started and the run
    spent more than the cap it was given. A cap is rounded down: that call does not start,
    the run stops by the budget (exit 4) having spent nothing."""
    data = manifest([{"key": "a", "prompt": "p"}])
    data["rates"] = [{"provider": "local", "model": "m1", "per_image": "0.000001"}]
    afc.write_manifest(data)
    plan = afc.json("plan", "manifest.yaml", "--max-spend", "0.0000005")
    assert plan["budget"] == "0.000000" and plan["fits_budget"] is False, plan
    result = afc("submit", "manifest.yaml", "--max-spend", "0.0000005", "--json")
    assert result.returncode == 4, result.stderr
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(0,)]
    assert afc.json("costs", "report")["total"]["priced"] == "0.000000"
