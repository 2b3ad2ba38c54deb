"""A conflict names what changed: the fields, with old and new values, in ``afc submit``'s
message and ``--json``, and in ``afc plan``."""

from __future__ import annotations

from conftest import manifest

from afc_cli.conflicts import SHOWN_CHARS, conflict_message, describe_changes, request_changes


def test_changes_are_named_by_path_with_both_values():
    old = {
        "prompt": "a",
        "params": {"size": "64x64", "seed": 1},
        "chain": [{"provider": "local", "model": "m1"}],
        "output": "{batch}/{key}.{ext}",
    }
    new = {
        "prompt": "b",
        "params": {"seed": 1.0, "latency_s": 0.5},
        "chain": [{"provider": "local", "model": "m2"}, {"provider": "local", "model": "m3"}],
        "output": "{batch}/{key}.{ext}",
    }
    assert request_changes(old, new) == [
        {"field": "chain[0].model", "old": "m1", "new": "m2"},
        {"field": "chain[1]", "new": {"provider": "local", "model": "m3"}},
        {"field": "params.latency_s", "new": 0.5},
        {"field": "params.size", "old": "64x64"},  # seed 1 and 1.0 hash alike: no change
        {"field": "prompt", "old": "a", "new": "b"},
    ]
    assert request_changes(old, old) == []
    assert request_changes({"params": {"x": True}}, {"params": {"x": 1}}) == [
        {"field": "params.x", "old": True, "new": 1}
    ]


def test_long_values_are_shortened_in_messages():
    changes = request_changes({"prompt": "x" * 500}, {"prompt": "y"})
    text = describe_changes(changes)
    assert text.startswith('prompt: "xxxx') and text.endswith(' -> "y"')
    assert len(text) < SHOWN_CHARS + 20 and "…" in text
    many = request_changes({"params": {str(i): i for i in range(9)}}, {"params": {}})
    assert describe_changes(many).endswith("and 3 more")
    message = conflict_message(
        {"key": "k", "stored_hash": "a" * 64, "new_hash": "b" * 64, "changes": changes}
    )
    assert "key 'k' changed prompt:" in message and "a" * 64 in message and "b" * 64 in message


def changed_manifest(afc):
    data = manifest(
        [
            {"key": "shot-001", "prompt": "a lighthouse at dawn", "params": {"size": "32x32"}},
            {"key": "shot-002", "prompt": "same"},
        ]
    )
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    data["jobs"][0]["prompt"] = "a lighthouse at dusk, " + "very " * 30 + "long"
    data["jobs"][0]["params"] = {"size": "48x32"}
    data["jobs"][0]["chain"] = [{**data["defaults"]["chain"][0], "model": "m9"}]
    afc.write_manifest(data)
    return data


def test_submit_names_the_changed_fields(afc):
    changed_manifest(afc)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 3
    (line,) = [x for x in result.stderr.splitlines() if "IDEMPOTENCY_CONFLICT" in x]
    assert "key 'shot-001' changed" in line
    assert 'chain[0].model: "m1" -> "m9"' in line
    assert 'params.size: "32x32" -> "48x32"' in line
    assert 'prompt: "a lighthouse at dawn" -> "a lighthouse at dusk, very very' in line
    assert "…" in line and "very " * 30 not in line  # the long prompt is shortened
    payload = afc.json("submit", "manifest.yaml", expect=3)
    (conflict,) = payload["conflicts"]
    fields = {c["field"]: c for c in conflict["changes"]}
    assert fields["prompt"]["new"].endswith("very long")  # whole in --json
    assert fields["params.size"] == {"field": "params.size", "old": "32x32", "new": "48x32"}
    assert fields["chain[0].model"]["old"] == "m1"
    assert set(fields) == {"chain[0].model", "params.size", "prompt"}


def test_plan_names_conflicting_keys_and_fields(afc):
    changed_manifest(afc)
    text = afc("plan", "manifest.yaml")
    assert text.returncode == 0, text.stderr
    assert "conflicting 1" in text.stdout
    assert "conflict shot-001: changed chain[0].model" in text.stdout
    assert 'params.size: "32x32" -> "48x32"' in text.stdout
    planned = afc.json("plan", "manifest.yaml")
    (conflict,) = planned["conflicts"]
    assert conflict["key"] == "shot-001"
    assert [c["field"] for c in conflict["changes"]] == ["chain[0].model", "params.size", "prompt"]
    job = next(j for j in planned["jobs"] if j["key"] == "shot-001")
    assert job["action"] == "conflict" and job["changes"] == conflict["changes"]
