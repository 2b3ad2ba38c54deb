"""Re-submitting a manifest of dependent jobs, end to end through ``afc`` (an outside audit):
a new job that needs a key refused as a conflict is refused with it, never rendered against
the admitted output its request does not name."""

from __future__ import annotations

import json
import sqlite3

import pytest
from conftest import manifest
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


def two_jobs(afc, frame=None, shot=None):
    afc.write_manifest(
        manifest(
            [
                {"key": "frame", "prompt": "frame", **(frame or {})},
                {"key": "shot", "prompt": "shot", **(shot or {})},
            ]
        )
    )


def gates_in_ledger(afc):
    needs = dict(
        afc.rows("SELECT j.key, n.need_key FROM job_needs n JOIN jobs j ON j.id = n.job_id")
    )
    return {
        key: (review, needs.get(key)) for key, review in afc.rows("SELECT key, review FROM jobs")
    }


@pytest.fixture(params=["sqlite", "postgres"])
def on_both(request, tmp_path):
    """``afc`` on a SQLite ledger, then on a PostgreSQL one (tests/test_postgres_e2e.py)."""
    if request.param == "sqlite":
        return request.getfixturevalue("afc")
    from test_postgres_e2e import PgAfc

    return PgAfc(tmp_path, request.getfixturevalue("pg_url"))


def test_review_and_needs_added_before_a_job_is_rendered_take_effect_as_plan_says(on_both):
    """Found by an outside audit: review and needs added on a re-submit of admitted jobs
    not yet rendered were dropped silently, while 'afc plan' promised both."""
    afc = on_both
    two_jobs(afc)
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    two_jobs(afc, frame={"review": True}, shot={"needs": ["frame"]})
    plan = afc.json("plan", "manifest.yaml")
    assert plan["order"] == [["frame"], ["shot"]] and plan["review"] == ["frame"]
    assert plan["gates_changed"] == [
        {"key": "frame", "review": True},
        {"key": "shot", "needs": ["frame"]},
    ]
    assert plan["gates_kept"] == []
    result = afc.json("submit", "manifest.yaml")
    assert result["gates_changed"] == plan["gates_changed"] and result["gates_kept"] == []
    assert statuses(afc) == {"frame": "awaiting_review", "shot": "blocked"}
    assert attempts(afc) == 1, "the shot waits for the frame's review"
    assert gates_in_ledger(afc) == {"frame": (1, None), "shot": (0, "frame")}
    assert afc.rows("SELECT COUNT(*) FROM events WHERE kind = 'gates_changed'") == [(2,)]
    assert afc("review", "approve", "frame").returncode == 0
    assert afc("resume").returncode == 0
    assert statuses(afc) == {"frame": "succeeded", "shot": "succeeded"}


def test_review_and_needs_removed_before_a_job_is_rendered_are_lifted(afc):
    two_jobs(afc, frame={"review": True}, shot={"needs": ["frame"]})
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    two_jobs(afc)
    assert afc.json("plan", "manifest.yaml")["order"] == []
    text = afc("submit", "manifest.yaml")
    assert text.returncode == 0, text.stderr
    assert "gates changed on jobs not yet rendered: frame (review), shot (needs)" in text.stderr
    assert statuses(afc) == {"frame": "succeeded", "shot": "succeeded"}
    assert gates_in_ledger(afc) == {"frame": (0, None), "shot": (0, None)}


def test_a_gate_change_on_a_rendered_job_is_kept_and_said_by_plan_and_submit_alike(on_both):
    afc = on_both
    two_jobs(afc)
    assert afc("submit", "manifest.yaml").returncode == 0
    paid = attempts(afc)
    two_jobs(afc, frame={"review": True}, shot={"needs": ["frame"]})
    plan = afc.json("plan", "manifest.yaml")
    assert plan["order"] == [] and plan["review"] == [] and plan["gates_changed"] == []
    assert [(k["key"], k["field"], k["admitted"], k["manifest"]) for k in plan["gates_kept"]] == [
        ("frame", "review", False, True),
        ("shot", "needs", [], ["frame"]),
    ]
    text = afc("plan", "manifest.yaml")
    assert "warning: key 'frame': review: true in the manifest does not take effect" in (
        text.stdout
    )
    result = afc.json("submit", "manifest.yaml")
    assert result["gates_kept"] == plan["gates_kept"] and result["gates_changed"] == []
    said = afc("submit", "manifest.yaml")
    assert said.returncode == 0
    assert (
        "warning: key 'shot': needs: [frame] in the manifest does not take effect: the job has "
        "been rendered (1 attempt(s); now succeeded); it keeps needs: [] as admitted"
    ) in said.stderr
    assert gates_in_ledger(afc) == {"frame": (0, None), "shot": (0, None)}
    assert attempts(afc) == paid


def test_new_needs_naming_a_refused_key_are_kept_as_admitted_and_said(on_both):
    """An admitted job cannot be refused by a later submit: it runs as admitted (a review
    found it reported "refused too, nothing is rendered for it", then rendered by the next
    resume without the review asked for). Its needs naming the refused key stay as
    admitted, said as a warning by plan and submit alike; its review change still applies."""
    afc = on_both
    two_jobs(afc)
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    two_jobs(afc, frame={"prompt": "another frame"}, shot={"needs": ["frame"], "review": True})
    plan = afc.json("plan", "manifest.yaml")
    result = afc.json("submit", "manifest.yaml", "--no-run", expect=3)
    for said in (plan, result):
        assert [c["key"] for c in said["conflicts"]] == ["frame"]
        assert said["gates_changed"] == [{"key": "shot", "review": True}]
        [kept] = said["gates_kept"]
        assert (kept["key"], kept["field"]) == ("shot", "needs")
        assert "names 'frame', whose change this submit refused" in kept["why"]
    assert gates_in_ledger(afc) == {"frame": (0, None), "shot": (1, None)}
    assert afc("resume").returncode == 0
    assert statuses(afc) == {"frame": "succeeded", "shot": "awaiting_review"}


def test_new_needs_that_would_wait_through_kept_needs_for_the_job_itself_are_not_applied(afc):
    """'frame' needs 'shot' and was cancelled (its needs kept); a manifest where 'shot'
    needs 'frame' instead has no cycle of its own, but applied it would make one: each
    waiting for the other once 'frame' is retried."""
    two_jobs(afc, frame={"needs": ["shot"]})
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    assert afc("cancel", "frame", "--yes").returncode == 0
    two_jobs(afc, shot={"needs": ["frame"]})
    plan = afc.json("plan", "manifest.yaml")
    kept = {(k["key"], k["field"]): k["why"] for k in plan["gates_kept"]}
    assert kept[("frame", "needs")] == "the job is cancelled"
    assert kept[("shot", "needs")].startswith("it would wait for 'frame', which waits for 'shot'")
    result = afc.json("submit", "manifest.yaml", expect=1)  # 1: 'frame' is cancelled
    assert result["gates_kept"] == plan["gates_kept"] and result["gates_changed"] == []
    assert gates_in_ledger(afc) == {"frame": (0, "shot"), "shot": (0, None)}
    assert statuses(afc) == {"frame": "cancelled", "shot": "succeeded"}


def test_a_need_added_while_a_run_is_going_is_waited_for_by_that_run(afc):
    """Found by a review: a run that began before a re-submit gave a job it had not claimed
    yet a new need rendered the job at once: its claim took a job now blocked."""
    from conftest import wait_for

    jobs = [
        {"key": "s1", "prompt": "s1", "params": {"latency_s": 1.5}},
        {"key": "s3", "prompt": "s3"},
        {"key": "final", "prompt": "final", "params": {"latency_s": 0.3}},
    ]
    afc.write_manifest(manifest(jobs))
    run = afc.popen("submit", "manifest.yaml", "--concurrency", "1")
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts", 1)
        jobs[1]["needs"] = ["final"]
        afc.write_manifest(manifest(jobs))
        changed = afc("submit", "manifest.yaml", "--no-run")
        assert "gates changed on jobs not yet rendered: s3 (needs)" in changed.stderr
    finally:
        assert run.wait(timeout=60) == 0, run.stderr.read()
    assert set(statuses(afc).values()) == {"succeeded"}
    began = dict(
        afc.rows("SELECT j.key, a.started_at FROM attempts a JOIN jobs j ON j.id = a.job_id")
    )
    ended = dict(
        afc.rows("SELECT j.key, a.ended_at FROM attempts a JOIN jobs j ON j.id = a.job_id")
    )
    assert began["s3"] >= ended["final"], "s3 rendered before the need it was given"


def test_plan_says_a_job_whose_need_was_rejected_fails_and_prices_no_render_for_it(afc):
    """Found by a review: plan counted (and priced) a render for a job whose need had been
    rejected, which the submit fails with DEPENDENCY_FAILED without rendering."""
    afc.write_manifest(manifest([{"key": "frame", "prompt": "frame", "review": True}]))
    assert afc("submit", "manifest.yaml").returncode == 0
    assert afc("review", "reject", "frame", "--reason", "too dark").returncode == 0
    two_jobs(afc, frame={"review": True}, shot={"needs": ["frame"]})
    plan = afc.json("plan", "manifest.yaml")
    shown = {job["key"]: job for job in plan["jobs"]}
    assert shown["shot"]["action"] == "dependency failed"
    assert shown["shot"]["failed_need"] == "frame"
    assert plan["to_render"] == 0 and plan["estimated_spend"] == "0.000000"
    text = afc("plan", "manifest.yaml").stdout
    assert "fails shot: needs frame, which ended badly (DEPENDENCY_FAILED" in text
    result = afc.json("submit", "manifest.yaml", expect=1)
    jobs = {job["key"]: job for job in result["jobs"]}
    assert jobs["shot"]["error"]["code"] == "DEPENDENCY_FAILED"
    assert attempts(afc) == 1, "only the frame was ever rendered"
