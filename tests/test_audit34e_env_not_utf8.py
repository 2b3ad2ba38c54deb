"""Outside audit 34e: AFC_HOST_ID and AFC_USER name this host and a decision's author in
the ledger (a lease's owner, a review's or a retry's events). Set to bytes that are not
UTF-8 (a value from a Latin-1 file or shell), 'afc submit' admitted the manifest's jobs and
then stopped at the first claim with 'unexpected error: UnicodeEncodeError ... (a bug in
afc)', exit 1, the jobs left queued; 'afc review approve' stopped the same way. Such a value
is now refused before anything is done, exit 2, as an argument that is not UTF-8 is."""

from __future__ import annotations

import os

import pytest
import yaml


@pytest.mark.parametrize("name", ["AFC_HOST_ID", "AFC_USER"])
def test_a_name_from_the_environment_that_is_not_utf8_is_refused_first(afc, name):
    manifest = {
        "version": 1,
        "batch": "b1",
        "defaults": {"chain": [{"provider": "local", "model": "m1"}]},
        "jobs": [{"key": "a", "prompt": "a lighthouse", "review": True}],
    }
    (afc.cwd / "shots.yaml").write_text(yaml.safe_dump(manifest))
    result = afc("submit", "shots.yaml")
    assert result.returncode == 0, result.stderr  # awaiting review
    value = os.fsdecode(b"ren\xe9")
    afc.env = dict(afc.env, **{name: value})
    for command in (["review", "approve", "a"], ["submit", "shots.yaml"]):
        result = afc(*command)
        assert result.returncode == 2, result.stderr
        assert f"{name} (ren\\xe9) is not UTF-8 text" in result.stderr, result.stderr
        assert "unexpected error" not in result.stderr
    del afc.env[name]
    status = afc.json("status", "--all")
    assert [job["status"] for job in status["jobs"]] == ["awaiting_review"]
