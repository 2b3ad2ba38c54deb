"""Review gates, dependent jobs and reference images, end to end through the real ``afc``
command (issue 17): a style frame awaiting review, its shots blocked, approve -> the shots
render with it as their reference, reject -> dependents fail, cycles refused, decisions
atomic under SIGKILL and under two concurrent approvals."""

from __future__ import annotations

import hashlib
import json
import signal

import pytest
from conftest import manifest

from afc_cli.ledger import Ledger, ReviewRace
from afc_cli.providers.local import render_png


def style_manifest(afc, *, fail_style=None, review=True, extra_jobs=()):
    (afc.cwd / "refs").mkdir(exist_ok=True)
    (afc.cwd / "refs" / "palette.png").write_bytes(render_png("palette", 16, 16))
    style = {
        "key": "style",
        "prompt": "harbour at dusk, painterly",
        "inputs": [{"path": "refs/palette.png"}],
    }
    if review:
        style["review"] = True
    if fail_style:
        style["params"] = {"fail": fail_style}
    data = manifest(
        [
            style,
            {"key": "shot-1", "prompt": "a boat", "inputs": [{"job": "style"}]},
            {"key": "shot-2", "prompt": "a keeper", "inputs": [{"job": "style"}]},
            {"key": "title", "prompt": "title card", "needs": ["shot-1", "shot-2"]},
            *extra_jobs,
        ]
    )
    afc.write_manifest(data)
    return data


def statuses(afc):
    return dict(afc.rows("SELECT key, status FROM jobs"))


def calls(log):
    """The local provider's call log: job id -> SHA-256 digests of the inputs it received."""
    out = {}
    for line in log.read_text().splitlines():
        parts = line.split()
        out.setdefault(parts[0], []).append(parts[2].split(",") if len(parts) > 2 else [])
    return out


def test_style_frame_awaits_review_then_approved_shots_render_with_its_sha256(afc):
    style_manifest(afc)
    log = afc.cwd / "calls.log"
    env = {"AFC_LOCAL_CALL_LOG": str(log)}
    first = afc.json("submit", "manifest.yaml", env=env)
    # paused for a person, not failed: exit 0 (cron must not alert every run)
    assert first["exit_code"] == 0
    assert statuses(afc) == {
        "style": "awaiting_review",
        "shot-1": "blocked",
        "shot-2": "blocked",
        "title": "blocked",
    }
    style_png = afc.outputs() / "b1" / "style.png"
    assert style_png.exists(), "the output under review is stored"
    style_sha = hashlib.sha256(style_png.read_bytes()).hexdigest()
    palette_sha = hashlib.sha256((afc.cwd / "refs" / "palette.png").read_bytes()).hexdigest()
    assert len(log.read_text().splitlines()) == 1, "only the style frame was rendered"
    # the style frame's request carried its path input
    assert list(calls(log).values()) == [[[palette_sha]]]

    listed = afc.json("review", "list")["awaiting_review"]
    assert [(r["key"], r["batch"], r["cost"]) for r in listed] == [("style", "b1", "0.050000")]
    assert listed[0]["output"] == style_png.as_uri()
    assert listed[0]["prompt"] == "harbour at dusk, painterly"
    assert listed[0]["model"] == "local/m1"
    stats = afc.json("queue", "stats")
    assert stats["awaiting_review"] == 1 and stats["blocked"] == 3
    assert stats["oldest_review_age_seconds"] >= 0
    alert = afc("queue", "stats", "--fail-if", "awaiting_review>0")
    assert alert.returncode == 1

    # a pause may last days: resume (cron) leaves it alone and renders nothing
    again = afc.json("resume", env=env)
    assert again["exit_code"] == 0
    assert statuses(afc)["style"] == "awaiting_review"
    assert len(log.read_text().splitlines()) == 1

    approved = afc("review", "approve", "style", "--note", "warm enough", "--by", "ana")
    assert approved.returncode == 0, approved.stderr
    assert afc.rows("SELECT decision, decided_by, note FROM reviews") == [
        ("approved", "ana", "warm enough")
    ]
    run = afc.json("resume", env=env)
    assert run["exit_code"] == 0
    assert set(statuses(afc).values()) == {"succeeded"}, "title ran in the same run as shots"
    received = calls(log)
    ids = dict(afc.rows("SELECT key, id FROM jobs"))
    assert received[ids["shot-1"]] == [[style_sha]]
    assert received[ids["shot-2"]] == [[style_sha]]
    assert received[ids["title"]] == [[]]
    # recorded on the attempt, shown by afc show --json
    story = afc.json("show", "shot-1")
    assert story["attempts"][0]["inputs"] == [
        {"source": "job:style", "sha256": style_sha, "size": style_png.stat().st_size}
    ]
    assert story["needs"] == [{"key": "style", "status": "succeeded"}]
    assert afc.json("show", "style")["decisions"][0]["by"] == "ana"
    # the input visibly changes the local provider's picture
    shot = (afc.outputs() / "b1" / "shot-1.png").read_bytes()
    assert shot != render_png("m1\x00a boat\x00", 64, 64)


def test_reject_fails_dependents_with_dependency_failed(afc):
    style_manifest(afc)
    assert afc("submit", "manifest.yaml").returncode == 0
    no_reason = afc("review", "reject", "style")
    assert no_reason.returncode == 2
    rejected = afc("review", "reject", "style", "--reason", "too dark", "--json")
    assert rejected.returncode == 0, rejected.stderr
    assert json.loads(rejected.stdout) == {"rejected": ["style"], "dependents_failed": 3}
    assert statuses(afc) == {
        "style": "rejected",
        "shot-1": "failed",
        "shot-2": "failed",
        "title": "failed",
    }
    errors = dict(afc.rows("SELECT key, error_code || ': ' || error_message FROM jobs"))
    assert errors["shot-1"].startswith("DEPENDENCY_FAILED: need 'style' ended rejected")
    # no advice to retry what cannot be retried (an outside audit found 'afc retry style')
    assert "afc retry" not in errors["shot-1"] and "new key" in errors["shot-1"]
    assert afc("retry", "style").returncode == 2
    assert errors["title"].startswith("DEPENDENCY_FAILED: need 'shot-1' ended failed")
    assert "rejected by" in errors["style"] and "too dark" in errors["style"]
    # rejected is terminal: a second decision is refused, naming the key
    again = afc("review", "approve", "style")
    assert again.returncode == 2 and "'style': it is rejected" in again.stderr
    # a rejection is final, and so are its consequences: resume passes the dependents by
    # as it passes the rejected job (it exited 1 at every cron run for ever after one
    # rejection, with nothing a person could retry; tests/test_audit19.py)
    assert afc("resume").returncode == 0


def test_cancelling_a_need_fails_its_blocked_dependents_at_once(afc):
    """As a rejection does, in the same transaction: an outside audit found them left
    ``blocked`` (queue stats: failed 0) until a run next looked."""
    style_manifest(afc)
    assert afc("submit", "manifest.yaml").returncode == 0  # style awaits review
    assert afc("cancel", "style").returncode == 0
    assert statuses(afc) == {
        "style": "cancelled",
        "shot-1": "failed",
        "shot-2": "failed",
        "title": "failed",
    }
    assert afc.json("queue", "stats")["failed"] == 3
    # a retry of the need puts its dependents back to wait for it
    assert afc("retry", "style").returncode == 0
    assert statuses(afc)["shot-1"] == "blocked"
    # cancelling the whole batch cancels the dependents too, not fails them on the way (a
    # review found them 'already final: failed', announced as job.failed)
    cancelled = afc.json("cancel", "--batch", "b1", "--yes")
    assert sorted(entry["key"] for entry in cancelled["cancelled"]) == [
        "shot-1",
        "shot-2",
        "style",
        "title",
    ]
    assert set(statuses(afc).values()) == {"cancelled"}


def test_retry_of_a_failed_need_lets_its_dependents_run_again(afc):
    style_manifest(afc, fail_style=["invalid"], review=False)
    first = afc.json("submit", "manifest.yaml", expect=1)
    assert first["counts"] == {"failed": 4}
    assert dict(afc.rows("SELECT key, error_code FROM jobs"))["shot-1"] == "DEPENDENCY_FAILED"
    retried = afc("retry", "style", "--by", "ops")
    assert retried.returncode == 0, retried.stderr
    # the dependents wait for it again (transitively), with a 'retried' event each
    assert statuses(afc) == {
        "style": "queued",
        "shot-1": "blocked",
        "shot-2": "blocked",
        "title": "blocked",
    }
    run = afc.json("resume")
    assert run["exit_code"] == 0
    assert set(statuses(afc).values()) == {"succeeded"}


@pytest.mark.parametrize(
    "jobs, problem",
    [
        (
            [
                {"key": "a", "prompt": "a", "needs": ["c"]},
                {"key": "b", "prompt": "b", "needs": ["a"]},
                {"key": "c", "prompt": "c", "inputs": [{"job": "b"}]},
            ],
            "wait for each other (a cycle)",
        ),
        ([{"key": "a", "prompt": "a", "needs": ["a"]}], "wait for each other (a cycle)"),
        (
            [{"key": "a", "prompt": "a", "needs": ["shot-9"]}, {"key": "shot-1", "prompt": "x"}],
            "job 0 (key 'a'): field 'needs[0]': unknown key 'shot-9' (did you mean 'shot-1'?)",
        ),
        (
            [{"key": "a", "prompt": "a", "inputs": [{"job": "other/x"}]}],
            "field 'inputs[0].job': 'other/x' is a job of another batch ('other')",
        ),
        (
            [{"key": "a", "prompt": "a", "inputs": [{"path": "missing.png"}]}],
            "job 0 (key 'a'): field 'inputs[0].path': no such file",
        ),
        (
            [{"key": "a", "prompt": "a", "inputs": [{"path": "https://x.example/y.png"}]}],
            "field 'inputs[0].path': 'https://x.example/y.png' is a URL; an input path names a",
        ),
        (
            [{"key": "a", "prompt": "a", "inputs": [{"path": "file://nas/refs/y.png"}]}],
            "field 'inputs[0].path': 'file://nas/refs/y.png' names a file on another host",
        ),
        (
            [{"key": "a", "prompt": "a", "inputs": [{"path": "x.png", "job": "b"}]}],
            "an input names either job: KEY or path: FILE",
        ),
    ],
)
def test_bad_dependencies_are_manifest_errors_with_nothing_written(afc, jobs, problem):
    afc.write_manifest(manifest(jobs))
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 2
    assert problem in result.stderr
    assert "manifest.yaml" in result.stderr
    assert not (afc.cwd / "afc.db").exists(), "nothing written, not even the ledger"
    plan = afc("plan", "manifest.yaml")
    assert plan.returncode == 2 and problem in plan.stderr


def test_a_cycle_leaves_an_existing_ledger_without_new_rows(afc):
    afc.write_manifest(manifest([{"key": "ok", "prompt": "fine"}]))
    assert afc("submit", "manifest.yaml").returncode == 0
    before = afc.rows("SELECT (SELECT COUNT(*) FROM jobs), (SELECT COUNT(*) FROM events)")
    afc.write_manifest(
        manifest(
            [
                {"key": "x", "prompt": "x", "needs": ["y"]},
                {"key": "y", "prompt": "y", "needs": ["x"]},
            ]
        )
    )
    result = afc("submit", "manifest.yaml")
    said = result.stderr.replace("'y' (job 1) -> 'x' (job 0) -> 'y' (job 1)", "X")
    said = said.replace("'x' (job 0) -> 'y' (job 1) -> 'x' (job 0)", "X")
    assert result.returncode == 2 and "jobs X wait for each other" in said
    assert afc.rows("SELECT (SELECT COUNT(*) FROM jobs), (SELECT COUNT(*) FROM events)") == before


def test_the_request_hash_covers_an_input_file_and_an_input_jobs_request(afc):
    style_manifest(afc, review=False)
    assert afc("submit", "manifest.yaml").returncode == 0
    hashes = dict(afc.rows("SELECT key, request_hash FROM jobs"))
    body = json.loads(afc.rows("SELECT request_json FROM jobs WHERE key = 'shot-1'")[0][0])
    assert body["inputs"] == [
        {"job": {"batch": "b1", "key": "style", "request_hash": hashes["style"]}}
    ]
    # the same file content elsewhere is the same request; another content is a new one
    (afc.cwd / "refs" / "palette.png").write_bytes(render_png("another palette", 16, 16))
    changed = afc.json("plan", "manifest.yaml", expect=None)
    conflicts = {c["key"]: c for c in changed["conflicts"]}
    # the style frame's file changed, so its hash, and so its shots' hashes
    assert set(conflicts) == {"style", "shot-1", "shot-2"}
    assert "inputs" in {c["field"].split("[")[0] for c in conflicts["style"]["changes"]}


def test_an_input_named_by_a_file_url_is_that_local_file(afc):
    """'path: file:///abs/ref.png' was refused as 'a URL ... (download it first)', advice
    wrong for a file already here: it is the file the URL names, the same request as its
    plain path (the request hash covers the bytes)."""
    ref = afc.cwd / "my refs" / "palette.png"
    ref.parent.mkdir()
    ref.write_bytes(render_png("a palette", 16, 16))
    plain = {"key": "a", "prompt": "a", "inputs": [{"path": str(ref)}]}
    afc.write_manifest(manifest([plain]))
    assert afc("submit", "manifest.yaml").returncode == 0
    url = "file://" + str(ref).replace(" ", "%20")
    for named in (url, url.replace("file://", "file://localhost")):
        afc.write_manifest(manifest([{**plain, "inputs": [{"path": named}]}]))
        again = afc.json("submit", "manifest.yaml")
        assert again["counts"] == {"succeeded": 1}, again
    assert afc.rows("SELECT COUNT(*) FROM attempts")[0][0] == 1  # the same request: no render


def test_plan_shows_the_dependency_order_and_the_reviews(afc):
    style_manifest(afc)
    plan = afc.json("plan", "manifest.yaml")
    assert plan["order"] == [["style"], ["shot-1", "shot-2"], ["title"]]
    assert plan["review"] == ["style"]
    text = afc("plan", "manifest.yaml")
    assert text.returncode == 0
    assert "style -> shot-1, shot-2 -> title" in text.stderr + text.stdout
    assert "waits for a review: style" in text.stderr + text.stdout
    assert not (afc.cwd / "afc.db").exists()


def test_plan_counts_awaiting_and_rejected_jobs_once_and_prices_no_render_for_them(afc):
    """Found by an outside audit: a job awaiting review was counted replayed and stored; a
    rejected one whose output was deleted was priced as a render no run would make; decided
    jobs were listed as waiting for a review."""
    style_manifest(afc)
    assert afc("submit", "manifest.yaml").returncode == 0  # style awaits review
    plan = afc.json("plan", "manifest.yaml")
    # style once (awaiting review, not also "stored"); its three blocked dependents to render
    assert (plan["replayed"], plan["stored"], plan["to_render"]) == (4, 0, 3)
    assert plan["review"] == ["style"]
    assert afc("review", "reject", "style", "--reason", "too dark").returncode == 0
    [(output,)] = afc.rows("SELECT output_key FROM jobs WHERE key = 'style'")
    (afc.cwd / "afc-outputs" / output).unlink()
    plan = afc.json("plan", "manifest.yaml")
    assert (plan["replayed"], plan["to_render"], plan["estimated_spend"]) == (4, 0, "0.000000")
    assert plan["review"] == []
    assert {job["action"] for job in plan["jobs"]} == {"replay (rejected)", "replay (failed)"}


@pytest.mark.parametrize("point", ["review_uncommitted", "review_committed"])
def test_a_decision_and_its_event_survive_sigkill_together(afc, point):
    data = style_manifest(afc)
    afc.env["AFC_HOOK_SECRET"] = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    data["webhook"] = {"url": "http://127.0.0.1:9/hook", "secret_env": "AFC_HOOK_SECRET"}
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    died = afc("review", "reject", "style", "--reason", "no", env={"AFC_CRASH_POINT": point})
    assert died.returncode == -signal.SIGKILL
    state = afc.rows(
        "SELECT (SELECT status FROM jobs WHERE key = 'style'),"
        " (SELECT COUNT(*) FROM reviews),"
        " (SELECT COUNT(*) FROM events WHERE kind = 'rejected'),"
        " (SELECT COUNT(*) FROM deliveries WHERE event = 'job.rejected'),"
        " (SELECT COUNT(*) FROM jobs WHERE error_code = 'DEPENDENCY_FAILED')"
    )[0]
    if point == "review_uncommitted":
        assert state == ("awaiting_review", 0, 0, 0, 0), "nothing of the decision survives"
        assert afc("review", "reject", "style", "--reason", "no").returncode == 0
    else:
        assert state == ("rejected", 1, 1, 1, 3), "all of the decision survives"
    assert afc.rows("SELECT COUNT(*) FROM deliveries WHERE event = 'job.awaiting_review'") == [(1,)]
    # the receiver is told who decided and why, and which stored output was rejected (an
    # outside audit found neither in the envelope)
    [(body,)] = afc.rows("SELECT envelope FROM deliveries WHERE event = 'job.rejected'")
    data = json.loads(body)["data"]
    assert data["review"] == {"decision": "rejected", "by": data["review"]["by"], "note": "no"}
    assert data["review"]["by"] and data["output_key"] == "b1/style.png"


def test_two_concurrent_approvals_record_one_decision(afc):
    style_manifest(afc)
    assert afc("submit", "manifest.yaml").returncode == 0
    procs = [afc.popen("review", "approve", "style", "--by", who) for who in ("ana", "ben")]
    codes = sorted(proc.wait(timeout=60) for proc in procs)
    assert codes == [0, 2]
    assert afc.rows("SELECT COUNT(*) FROM reviews") == [(1,)]
    assert afc.rows("SELECT COUNT(*) FROM events WHERE kind = 'approved'") == [(1,)]


def test_a_stale_approval_loses_to_the_first_and_writes_nothing(afc):
    """The guard itself: both approvals read the job awaiting review; the second's guarded
    update matches no row, so it raises and its transaction writes nothing."""
    style_manifest(afc)
    assert afc("submit", "manifest.yaml").returncode == 0
    first, second = Ledger(afc.cwd / "afc.db"), Ledger(afc.cwd / "afc.db")
    try:
        seen_by_first = first.jobs_by_key("style")
        seen_by_second = second.jobs_by_key("style")
        assert seen_by_second[0]["status"] == "awaiting_review"
        first.decide_reviews(seen_by_first, "approved", by="ana", note=None)
        with pytest.raises(ReviewRace):
            second.decide_reviews(seen_by_second, "rejected", by="ben", note="late")
    finally:
        first.close()
        second.close()
    assert afc.rows("SELECT decision, decided_by FROM reviews") == [("approved", "ana")]
    assert statuses(afc)["style"] == "succeeded"
    assert afc.rows("SELECT COUNT(*) FROM jobs WHERE status = 'failed'") == [(0,)]


def test_approving_several_keys_is_all_or_nothing(afc):
    style_manifest(afc)
    assert afc("submit", "manifest.yaml").returncode == 0
    refused = afc("review", "approve", "style", "shot-1", "nope")
    assert refused.returncode == 2
    assert "'shot-1': it is blocked, not awaiting review" in refused.stderr
    assert "'nope': no job with this key" in refused.stderr
    assert afc.rows("SELECT COUNT(*) FROM reviews") == [(0,)]
    assert statuses(afc)["style"] == "awaiting_review"


def test_review_functions_for_the_web_page(afc):
    """afc_cli/review.py is what ``afc serve`` calls: same rules in-process."""
    from afc_cli import review
    from afc_cli.errors import UsageError

    style_manifest(afc)
    assert afc("submit", "manifest.yaml").returncode == 0
    ledger = Ledger(afc.cwd / "afc.db")
    try:
        rows = review.pending(ledger, now=10**10)
        assert [r["key"] for r in rows] == ["style"]
        assert set(rows[0]) == {
            "job_id",
            "batch",
            "key",
            "model",
            "output",
            "sha256",
            "cost_micros",
            "cost",
            "unpriced_attempts",
            "age_s",
            "prompt",
        }
        assert rows[0]["cost_micros"] == 50_000 and rows[0]["age_s"] > 0
        assert rows[0]["cost"] == "0.050000" and rows[0]["unpriced_attempts"] == 0
        with pytest.raises(UsageError, match="'shot-1'"):
            review.approve(ledger, ["shot-1"], by="ana")
        assert review.approve(ledger, ["style"], by="ana", batch="b1") == ["style"]
        assert review.pending(ledger) == []
    finally:
        ledger.close()


def _approved_style_then(afc, damage):
    style_manifest(afc)
    assert afc.json("submit", "manifest.yaml")["exit_code"] == 0
    assert afc("review", "approve", "style").returncode == 0
    damage(afc.outputs() / "b1" / "style.png")
    return afc.json("resume", expect=None)


def test_a_needs_output_deleted_from_storage_fails_its_dependents_saying_so(afc):
    """Found by an outside audit: a need's output deleted from storage left its dependents
    waiting run after run ('the next run retries the render step, never the render'), then
    dead-lettered with advice that 'afc retry' stores a spooled output, though none existed
    and the retry would render and pay. It is an input gone, said at once."""
    run = _approved_style_then(afc, lambda path: path.unlink())
    assert run["exit_code"] == 1
    jobs = {job["key"]: job for job in run["jobs"]}
    for key in ("shot-1", "shot-2"):
        assert jobs[key]["status"] == "failed"
        assert jobs[key]["error"]["code"] == "INPUT_UNAVAILABLE"
        assert "is gone from storage" in jobs[key]["error"]["message"]
    assert jobs["title"]["error"]["code"] == "DEPENDENCY_FAILED"
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(1,)], "nothing rendered or paid"


def test_a_need_unreadable_in_storage_waits_and_says_nothing_was_rendered(afc):
    """A need's output that storage holds but cannot read (here a folder where the file
    was) is a storage failure to wait out; the message must not speak of a render to keep
    or a spool file to store (none exists: nothing was rendered for the dependent)."""

    def folder(path):
        path.unlink()
        path.mkdir()

    run = _approved_style_then(afc, folder)
    jobs = {job["key"]: job for job in run["jobs"]}
    for key in ("shot-1", "shot-2"):
        assert jobs[key]["status"] == "waiting", jobs[key]
        assert "before any render is paid" in jobs[key]["waiting"]
        assert "never the render" not in jobs[key]["waiting"]
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(1,)]
