"""Outside audit 18: the CLI's words and exit codes (README "Exit codes", "Money")."""

from __future__ import annotations

from conftest import manifest


def test_a_budget_refuses_no_finished_batch_for_its_unpriced_models(afc):
    """A finished batch on a model without a rate card, submitted again under --max-spend
    (a cron line that always passes one): exit 2, 'a budget needs a per-image rate card for
    every model that may run', though every job was done and nothing would be called; the
    plan said the submit would be refused. Only the jobs a run may render are checked: a
    new job on that model is still refused, writing nothing."""
    data = manifest([{"key": "a", "prompt": "a"}])
    data["defaults"]["chain"][0]["model"] = "unpriced"
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    again = afc("submit", "manifest.yaml", "--max-spend", "1")
    assert again.returncode == 0, again.stderr
    for args in (("plan",), ("submit", "--dry-run")):
        planned = afc(*args, "manifest.yaml", "--max-spend", "1", "--json")
        assert planned.returncode == 0, planned.stderr
        assert afc.json(*args, "manifest.yaml", "--max-spend", "1")["problems"] == []
    data["jobs"].append({"key": "b", "prompt": "b"})
    afc.write_manifest(data)
    refused = afc("submit", "manifest.yaml", "--max-spend", "1")
    assert refused.returncode == 2 and "local/unpriced" in refused.stderr
    assert afc.rows("SELECT key FROM jobs") == [("a",)]
    assert afc("plan", "manifest.yaml", "--max-spend", "1").returncode == 2
