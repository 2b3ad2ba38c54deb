"""Re-submitting a manifest of dependent jobs, end to end through ``afc`` (an outside audit):
a new job that needs a key refused as a conflict is refused with it, never rendered against
the admitted output its request does not name."""

from __future__ import annotations

from test_issue17_review import statuses, style_manifest


def attempts(afc):
    return afc.rows("SELECT COUNT(*) FROM attempts")[0][0]


def approved_style(afc):
    """The style frame rendered and approved, its shots and title rendered with it."""
    data = style_manifest(afc)
    assert afc("submit", "manifest.yaml").returncode == 0
    assert afc("review", "approve", "style").returncode == 0
    assert afc("resume").returncode == 0
    assert set(statuses(afc).values()) == {"succeeded"}
    return data


def test_a_new_job_whose_input_job_was_refused_as_a_conflict_is_refused_too(afc):
    """Found by an outside audit: a new shot using the changed (refused) style frame was
    admitted and rendered, paid, with the old frame's output while its request hash named
    the new frame's request."""
    data = approved_style(afc)
    paid = attempts(afc)
    data["jobs"][0]["prompt"] = "harbour at dusk, crimson and gold"
    data["jobs"].append({"key": "shot-3", "prompt": "gulls", "inputs": [{"job": "style"}]})
    # an unrelated new job still runs: only what depends on the refused change is refused
    data["jobs"].append({"key": "lone", "prompt": "a lone buoy"})
    afc.write_manifest(data)

    plan = afc.json("plan", "manifest.yaml")
    planned = {job["key"]: job for job in plan["jobs"]}
    assert planned["shot-3"]["action"] == "conflict"
    assert planned["shot-3"]["refused_need"] == "style"
    assert (plan["conflicting"], plan["to_render"], plan["estimated_spend"]) == (
        4,
        1,
        "0.050000",
    )
    text = afc("plan", "manifest.yaml")
    assert "conflict shot-3: needs style, whose change is refused" in text.stdout

    result = afc("submit", "manifest.yaml")
    assert result.returncode == 3, result.stderr
    assert "key 'shot-3' needs 'style', whose changed request was refused" in result.stderr
    assert "Traceback" not in result.stderr
    assert "shot-3" not in statuses(afc), "never admitted"
    assert statuses(afc)["lone"] == "succeeded"
    assert attempts(afc) == paid + 1, "only the unrelated job was paid for"
    events = afc.rows("SELECT detail_json FROM events WHERE kind = 'conflict_refused'")
    assert any('"refused_need":"style"' in detail for (detail,) in events)

    again = afc.json("submit", "manifest.yaml", expect=3)
    refused = {c["key"]: c for c in again["conflicts"]}
    assert set(refused) == {"style", "shot-1", "shot-2", "shot-3"}
    assert refused["shot-3"]["refused_need"] == "style"
    assert refused["shot-3"]["stored_hash"] is None
    assert attempts(afc) == paid + 1


def test_a_refusal_follows_needs_in_turn_also_to_jobs_listed_before_their_need(afc):
    """An explicit need may name a later job of the list: such a job is decided once every
    job has been seen, and a job that needs a refused new job is refused too."""
    data = approved_style(afc)
    paid = attempts(afc)
    data["jobs"][0]["prompt"] = "harbour at dusk, crimson and gold"
    data["jobs"] = [
        {"key": "poster", "prompt": "a poster", "needs": ["shot-3"]},  # before its need
        {"key": "early", "prompt": "an early card", "needs": ["style"]},
        *data["jobs"],
        {"key": "shot-3", "prompt": "gulls", "needs": ["style"]},
        {"key": "free", "prompt": "no needs", "needs": ["title"]},  # title: a replay
    ]
    afc.write_manifest(data)
    plan = afc.json("plan", "manifest.yaml")
    planned = {job["key"]: job.get("refused_need") for job in plan["jobs"]}
    assert (planned["poster"], planned["early"], planned["shot-3"], planned["free"]) == (
        "shot-3",
        "style",
        "style",
        None,
    )
    result = afc.json("submit", "manifest.yaml", expect=3)
    refused = {c["key"]: c.get("refused_need") for c in result["conflicts"]}
    assert refused == {
        "style": None,
        "shot-1": None,
        "shot-2": None,
        "early": "style",
        "shot-3": "style",
        "poster": "shot-3",
    }
    assert [c["key"] for c in plan["conflicts"]] == [c["key"] for c in result["conflicts"]]
    assert statuses(afc)["free"] == "succeeded"
    assert not {"poster", "early", "shot-3"} & set(statuses(afc))
    assert attempts(afc) == paid + 1
