"""Outside audit 31b (money as reported): an 'afc worker' of a shared budget says the
budget's figure apart from its own ('budget 'workers': 0.050000 of 0.200000 USD priced'), but
said nothing of the budget's attempts of unknown cost: a worker started after the one whose
call timed out (possibly paid, its cost unknown) printed 'spent 0.000000 USD (priced)' and the
budget's priced figure alone, nothing anywhere in its line telling that the budget had spent
more than that. The budget's figure now carries them as a run's spend does ('+ 1 attempt of
unknown cost'), and --json has them as the budget's unknown_cost_attempts."""

from __future__ import annotations

from conftest import manifest


def test_a_workers_budget_figure_says_the_budgets_attempts_of_unknown_cost(afc):
    data = manifest([{"key": "a", "prompt": "a lighthouse", "params": {"fail": ["timeout"]}}])
    afc.write_manifest(data)  # 0.05 USD a render; its first call times out, cost unknown
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    first = afc("worker", "--until-idle", "--max-spend", "0.20")
    assert first.returncode == 0, first.stderr
    assert "spent 0.050000 USD (priced) + 1 attempt of unknown cost" in first.stderr
    assert (
        "budget 'workers': 0.050000 of 0.200000 USD priced + 1 attempt of unknown cost"
        in first.stderr
    ), first.stderr
    # another worker of the budget, later: it started nothing, the budget's figure still
    # holds the first one's call of unknown cost
    second = afc("worker", "--until-idle", "--max-spend", "0.20")
    assert "spent 0.000000 USD (priced);" in second.stderr, second.stderr
    assert (
        "budget 'workers': 0.050000 of 0.200000 USD priced + 1 attempt of unknown cost"
        in second.stderr
    ), second.stderr
    shown = afc.json("worker", "--until-idle", "--max-spend", "0.20")
    assert (shown["spent"], shown["unknown_cost_attempts"]) == ("0.000000", 0)
    assert shown["budget"]["priced"] == "0.050000"
    assert shown["budget"]["unknown_cost_attempts"] == 1, shown["budget"]
