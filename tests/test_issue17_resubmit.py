"""Re-submitting a manifest of dependent jobs, end to end through ``afc`` (an outside audit):
a new job that needs a key refused as a conflict is refused with it, never rendered against
the admitted output its request does not name."""

from __future__ import annotations

import json
import sqlite3

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


def ids(afc):
    return dict(afc.rows("SELECT key, id FROM jobs"))


def failed_on_its_input(afc, key):
    [(status, code, message, tried)] = afc.rows(
        "SELECT status, error_code, error_message, attempts FROM jobs WHERE key = ?", (key,)
    )
    assert (status, code, tried) == ("failed", "INPUT_UNAVAILABLE", 0), message
    return message


def test_a_job_input_whose_request_is_not_the_one_the_hash_covers_fails_sending_nothing(afc):
    """Defence in depth: a job admitted against another request of its input job (the
    audit's ledger: a shot covering a refused style-frame request) fails, naming both
    requests, instead of being sent the admitted request's output."""
    style_manifest(afc, review=False)
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    hashes = dict(afc.rows("SELECT key, request_hash FROM jobs"))
    stored = json.loads(afc.rows("SELECT inputs_json FROM jobs WHERE key = 'shot-1'")[0][0])
    # the input job's request hash is kept beside it, as the shot's own hash covers it
    assert stored == [
        {"job": "style", "job_id": ids(afc)["style"], "request_hash": hashes["style"]}
    ]
    other = "e" * 64  # a request of 'style' that was refused
    stored[0]["request_hash"] = other
    conn = sqlite3.connect(afc.cwd / "afc.db")
    with conn:
        conn.execute("UPDATE jobs SET inputs_json = ? WHERE key = 'shot-1'", (json.dumps(stored),))
    conn.close()
    log = afc.cwd / "calls.log"
    result = afc("resume", env={"AFC_LOCAL_CALL_LOG": str(log)})
    assert result.returncode == 1 and "Traceback" not in result.stderr
    message = failed_on_its_input(afc, "shot-1")
    assert f"input job 'style' is request {hashes['style']} in the ledger" in message
    assert f"covers 'style' as request {other}" in message and "nothing was sent" in message
    assert ids(afc)["shot-1"] not in log.read_text()
    assert statuses(afc)["shot-2"] == "succeeded"


def test_a_job_admitted_before_the_hash_was_kept_beside_its_input_is_checked_by_its_body(afc):
    """A row written before ``inputs_json`` kept the input's request hash: the hashed body
    (``request_json``) says which request it covers."""
    style_manifest(afc, review=False)
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    style_hash = afc.rows("SELECT request_hash FROM jobs WHERE key = 'style'")[0][0]
    conn = sqlite3.connect(afc.cwd / "afc.db")
    with conn:
        for key, job_id in ids(afc).items():
            if key.startswith("shot-"):  # the old shape: the key and id only
                old = json.dumps([{"job": "style", "job_id": ids(afc)["style"]}])
                conn.execute("UPDATE jobs SET inputs_json = ? WHERE id = ?", (old, job_id))
        # shot-1 as the audit left it: its hashed body names a request of 'style' that was
        # refused as a conflict, while the ledger's 'style' is the one admitted first
        conn.execute(
            "UPDATE jobs SET request_json = replace(request_json, ?, ?) WHERE key = 'shot-1'",
            (style_hash, "e" * 64),
        )
    conn.close()
    result = afc("resume")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "nothing was sent" in failed_on_its_input(afc, "shot-1")
    assert statuses(afc)["shot-2"] == "succeeded", "an old row that matches still renders"
