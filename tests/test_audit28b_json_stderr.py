"""afc submit --json says its conflicts and the jobs its manifest left out on stderr too, as
without --json (outside audit 28b)."""

from __future__ import annotations

import json

from conftest import jobs, manifest


def test_submit_json_says_conflicts_and_unlisted_jobs_on_stderr(afc):
    """'afc submit m.yaml --json > result.json' in a cron job or CI step: stdout goes to the
    file, stderr to the person (the job lines are there), but an IDEMPOTENCY_CONFLICT (which
    key, what changed, both hashes, what to do) and the unfinished jobs of the batch that the
    manifest no longer lists were only in the JSON: exit 3 with nothing on stderr saying
    why."""
    afc.write_manifest(manifest(jobs(3)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    changed = jobs(2)
    changed[0]["prompt"] = "a changed prompt"
    afc.write_manifest(manifest(changed))
    result = afc("submit", "manifest.yaml", "--no-run", "--json")
    assert result.returncode == 3, result.stderr
    payload = json.loads(result.stdout)  # stdout holds the JSON alone, as before
    assert [c["key"] for c in payload["conflicts"]] == ["shot-001"]
    assert payload["unlisted"] == ["shot-003"]
    assert "IDEMPOTENCY_CONFLICT: key 'shot-001'" in result.stderr, result.stderr
    assert payload["conflicts"][0]["new_hash"] in result.stderr
    assert "1 unfinished job(s) of batch b1 are not in this manifest" in result.stderr
    # --quiet keeps a conflict, as without --json, and leaves out the rest
    quiet = afc("submit", "manifest.yaml", "--no-run", "--json", "--quiet")
    assert "IDEMPOTENCY_CONFLICT" in quiet.stderr and "not in this manifest" not in quiet.stderr
