"""Outside audit 31c: a refused manifest's message quotes a field's value shortened, not
megabytes of it (a base64 picture or a log pasted into a field by a script's mistake)."""

from __future__ import annotations

import json

import yaml

BIG = "x" * 3_000_000


def _chain(model: str = "demo-v1", provider: str = "local") -> list[dict]:
    return [{"provider": provider, "model": model}]


def test_a_huge_value_in_a_refused_field_is_quoted_shortened(afc):
    """A provider name of 3 MB, an unknown field and an unknown 'needs' key: afc wrote 9 MB
    to the terminal, each problem quoting the whole value, the reason after it out of sight."""
    manifest = {
        "version": 1,
        "batch": "b",
        "defaults": {"chain": _chain()},
        "jobs": [
            {"key": "a", "prompt": "p", "chain": _chain(provider=BIG)},
            {"key": "b", "prompt": "p", "needs": [BIG]},
            {"key": "c", "prompt": "p", "params": {"size": BIG}},
        ],
    }
    (afc.cwd / "shots.yaml").write_text(yaml.safe_dump(manifest))
    result = afc("submit", "shots.yaml", "--no-run")
    assert result.returncode == 2, result.stderr[:2000]
    assert "Traceback" not in result.stderr
    assert len(result.stderr) < 20_000, len(result.stderr)
    said = result.stderr
    assert "job 0 (key 'a'): field 'chain[0].provider': unknown provider 'xxx" in said
    assert "job 2 (key 'c'): field 'params.size': must be WxH" in said, said[:3000]
    assert "characters left out" in said
    assert not (afc.cwd / "afc.db").exists()


def test_a_job_list_line_quoting_a_huge_value_is_shortened(afc):
    line = json.dumps({"key": "a", "prompt": "p", "chain": _chain(model=BIG[:900_000] + "\x01")})
    (afc.cwd / "jobs.jsonl").write_text("\n".join([line] * 5) + "\n")
    manifest = {
        "version": 1,
        "batch": "b",
        "defaults": {"chain": _chain()},
        "jobs_from": "jobs.jsonl",
    }
    (afc.cwd / "shots.yaml").write_text(yaml.safe_dump(manifest))
    result = afc("submit", "shots.yaml", "--no-run")
    assert result.returncode == 2, result.stderr[:2000]
    assert len(result.stderr) < 20_000, len(result.stderr)
    assert "jobs.jsonl line 5 (key 'a'): field 'chain[0].model'" in result.stderr
    assert "has a control or invisible character" in result.stderr
