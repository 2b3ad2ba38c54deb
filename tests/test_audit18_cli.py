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


def test_retry_of_a_job_with_needs_says_it_is_blocked_not_queued(afc):
    """'afc retry' of a job failed DEPENDENCY_FAILED said 'queued again (was failed)' and 'run
    afc resume to render them', though the retry put it back to blocked (its need still
    failed): the next run renders nothing of it. It says blocked, and --json gives each
    retried job's status."""
    data = manifest(
        [
            {"key": "a", "prompt": "a", "params": {"fail": ["auth"]}},
            {"key": "b", "prompt": "b", "needs": ["a"]},
            {"key": "c", "prompt": "c", "params": {"fail": ["auth"]}},
        ]
    )
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 1
    assert dict(afc.rows("SELECT key, status FROM jobs")) == {
        "a": "failed",
        "b": "failed",
        "c": "failed",
    }
    retried = afc("retry", "b", "c")
    assert retried.returncode == 0, retried.stderr
    assert "b1/b: blocked again (was failed)" in retried.stderr
    assert "b1/b: queued again" not in retried.stderr
    assert "b1/c: queued again (was failed)" in retried.stderr
    afc("cancel", "b", "c")
    assert afc("retry", "--batch", "b1", "--cancelled", "--yes").returncode == 0
    out = afc.json("retry", "--batch", "b1", "--failed", "--yes")
    assert [(r["key"], r["status"]) for r in out["retried"]] == [("a", "queued")]
    assert dict(afc.rows("SELECT key, status FROM jobs")) == {
        "a": "queued",
        "b": "blocked",
        "c": "queued",
    }
