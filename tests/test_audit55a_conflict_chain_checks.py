"""A waiting job moved to another model in the manifest, end to end through ``afc`` (an
outside audit). Its changed request is refused as a conflict, and a submit runs neither it
nor the admitted request of that key; yet the submit checked the new chain's API key and,
under a budget, its rate card, as if it would run, and refused the whole submit (exit 2,
nothing admitted, the night's new jobs not run): 'a budget needs a per-image rate card for
every model that may run', of a model that may not. ``afc plan`` said the same."""

from __future__ import annotations

from conftest import manifest


def test_a_conflicting_jobs_new_chain_is_not_checked_as_if_it_ran(afc, ledger_url):
    afc.env["AFC_LEDGER"] = ledger_url
    afc.env.pop("OPENAI_API_KEY", None)
    data = manifest([{"key": "a", "prompt": "a cat"}, {"key": "b", "prompt": "a dog"}])
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0

    data["budget"] = "1.00"
    data["jobs"][1]["chain"] = [{"provider": "openai", "model": "gpt-image-1"}]  # no card, no key
    data["jobs"].append({"key": "c", "prompt": "a fox"})
    afc.write_manifest(data)
    plan = afc.json("plan", "manifest.yaml")
    assert (plan["problems"], plan["environment"]) == ([], []), plan
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 3, result.stderr
    assert "IDEMPOTENCY_CONFLICT: key 'b' changed chain" in result.stderr
    status = {job["key"]: job["status"] for job in afc.json("status", "--all")["jobs"]}
    assert status == {"a": "succeeded", "b": "queued", "c": "succeeded"}
