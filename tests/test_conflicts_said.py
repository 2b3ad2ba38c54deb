"""A submit says its conflicts one by one on stderr up to a bound, then how many more: an
edit of the defaults over a 100,000-job list was 100,000 messages on stderr (57 MB, 44 s),
the run's summary lost above them. ``--json`` still carries every conflict."""

from __future__ import annotations

import json

from conftest import manifest

from afc_cli.cli import CONFLICTS_SAID


def test_a_submit_says_the_first_conflicts_then_how_many_more(afc):
    n = CONFLICTS_SAID + 7
    data = manifest([{"key": f"shot-{i:02d}", "prompt": f"shot {i}"} for i in range(n)])
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    data["defaults"]["params"] = {"size": "512x512"}  # every job's request changed
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml", "--no-run")
    assert result.returncode == 3, result.stderr
    said = [line for line in result.stderr.splitlines() if "IDEMPOTENCY_CONFLICT" in line]
    assert len(said) == CONFLICTS_SAID, result.stderr
    assert "7 more conflicting keys, refused as these (afc plan MANIFEST names each" in (
        result.stderr
    )
    listed = afc("submit", "manifest.yaml", "--no-run", "--json")
    assert listed.returncode == 3
    assert len(json.loads(listed.stdout)["conflicts"]) == n
