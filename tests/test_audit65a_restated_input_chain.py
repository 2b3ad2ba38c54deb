"""Outside audit 65a: a job whose need an earlier afc admitted with its ``fallback_on`` in
another order is the same request now (``manifest.restated``), and so is each job using its
output, two links down too (``manifest.same_request``'s ``restates``): the re-submit replays
them. But a job added by that re-submit, using the output of such a replayed job whose own
input job was restated, was admitted recording that input as the request the manifest hashes
now, not the one the ledger holds: its run refused to send the stored output
(INPUT_UNAVAILABLE, 'a change to ... refused as a conflict', though none was), the job failed,
exit 1, and the new key its message offered met the same refusal. A new job's input now
records the request its need was admitted as where the need was restated."""

from __future__ import annotations

import json

from conftest import jobs, manifest, old_build

BEFORE_64G = "9f6b0f3"  # the afc that hashed fallback_on as written


def _manifest(keys: list[tuple[str, str | None]]) -> dict:
    data = manifest(jobs(0))
    data["defaults"]["chain"] = [
        {
            "provider": "local",
            "model": "m1",
            "attempts": 2,
            "backoff": {"base": 0.01, "cap": 0.05},
            "fallback_on": ["unavailable", "exhausted"],  # not in afc's order now
        },
        {"provider": "local", "model": "m2", "attempts": 1},
    ]
    data["rates"].append({"provider": "local", "model": "m2", "per_image": "0.05"})
    data["jobs"] = [
        {"key": key, "prompt": f"the {key}", **({"inputs": [{"job": of}]} if of else {})}
        for key, of in keys
    ]
    return data


def test_a_new_job_using_a_replayed_job_two_links_below_a_restated_one(afc, tmp_path):
    old_env = {"PYTHONPATH": str(old_build(BEFORE_64G, tmp_path / "old-build"))}
    afc.write_manifest(_manifest([("style", None), ("shot", "style")]))
    ran = afc("submit", "manifest.yaml", env=old_env)
    assert ran.returncode == 0, ran.stderr

    calls = afc.cwd / "calls.log"
    env = {"AFC_LOCAL_CALL_LOG": str(calls)}
    afc.write_manifest(_manifest([("style", None), ("shot", "style"), ("final", "shot")]))
    plan = afc.json("plan", "manifest.yaml")
    assert plan["conflicts"] == [], plan["conflicts"]
    again = afc("submit", "manifest.yaml", "--json", env=env)
    said = json.loads(again.stdout)
    assert said["admitted"] == {"new": 1, "replayed": 2, "conflicts": 0}, said["admitted"]
    final = next(job for job in said["jobs"] if job["key"] == "final")
    assert final["status"] == "succeeded", final["error"]
    assert again.returncode == 0, again.stderr
    assert len(calls.read_text().splitlines()) == 1  # final's render alone

    # and the next re-submit replays all three, rendering nothing
    third = afc("submit", "manifest.yaml", "--json", env=env)
    assert third.returncode == 0, third.stderr
    assert json.loads(third.stdout)["admitted"] == {"new": 0, "replayed": 3, "conflicts": 0}
    assert len(calls.read_text().splitlines()) == 1
