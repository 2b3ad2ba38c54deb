"""The round-2 contract line by line (audit 17; README "Review gates, dependencies and reference images"): the interplay of review gates, dependencies and
reference images with workers, ``afc serve`` and ``afc ledger copy`` on PostgreSQL."""

from __future__ import annotations

import hashlib
import time

import pytest
from conftest import jobs, manifest, race_on_a_lock
from test_issue17_review import style_manifest
from test_ledger_copy import _copy_held_until_waited_on


@pytest.fixture
def pg(tmp_path, pg_url):
    from test_postgres_e2e import PgAfc

    return PgAfc(tmp_path, pg_url)


def test_limits_a_re_submit_lowers_reach_a_busy_worker(pg):
    """A worker's run loop reads the provider limits when it starts, and a busy worker's loop
    is fed claim after claim (Refill) without ending: a re-submit that lowered a provider's
    ``limits`` (after its 429s, say) went unheeded for as long as work came. Here 40 jobs
    of 0.3 s at 4 at once; the manifest, re-submitted after the first calls, allows one call
    at a time: the loop that follows (its attempts under a run id of their own) makes one
    call at a time, where the old loop made 4 to the end."""
    pg.write_manifest(manifest(jobs(40, latency_s=0.3)))
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    worker = pg.popen(
        "worker", "--until-idle", "--poll", "0.1", "--concurrency", "4", "--claim", "4"
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and worker.poll() is None:
            if pg.rows("SELECT COUNT(*) FROM attempts WHERE status = 'succeeded'")[0][0] >= 4:
                break
            time.sleep(0.02)
        before = {row[0] for row in pg.rows("SELECT DISTINCT run_id FROM attempts")}
        pg.write_manifest(manifest(jobs(40, latency_s=0.3), limits={"local": {"concurrency": 1}}))
        resubmitted = pg("submit", "manifest.yaml", "--no-run")
        assert resubmitted.returncode == 0, resubmitted.stderr
        assert worker.wait(timeout=120) == 0, worker.stderr.read()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert pg.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("succeeded", 40)]
    spans = sorted(pg.rows("SELECT started_at, ended_at, run_id FROM attempts"))
    later = [(start, end) for start, end, run in spans if run not in before]
    assert later, "no loop of the worker read the lowered limit"
    first_later = later[0][0]
    assert all(end <= first_later for start, end, run in spans if run in before)
    for (_, ended), (started, _) in zip(later, later[1:], strict=False):
        assert started >= ended, "two calls in flight at once under a limit of one"


def _moved_refused(code: int, stderr: str, back) -> None:
    assert code == 2 and f"was moved to {back}" in stderr, (code, stderr)
    assert "Traceback" not in stderr


@pytest.mark.parametrize("decision", [("approve",), ("reject", "--reason", "too dark")])
def test_a_decision_waiting_on_the_copys_lock_is_refused_once_the_source_is_moved(
    afc, pg_url, monkeypatch, decision
):
    """A review decision that passed ``refuse_moved`` before the copy committed waited on the
    copy's lock on the jobs table, then committed on the moved source: the reviewer was told
    'approved' (exit 0) while the destination, the ledger whose runs go on, kept the job
    awaiting review (its dependents blocked for good there), and the source, which runs
    nothing, held a decision no run reads."""
    env = {"AFC_LEDGER": pg_url}
    style_manifest(afc)
    assert afc("submit", "manifest.yaml", env=env).returncode == 0
    back = afc.cwd / "back.db"
    code, stderr = _copy_held_until_waited_on(
        lambda: afc.popen("review", *decision[:1], "style", *decision[1:], env=env),
        pg_url,
        back,
        monkeypatch,
    )
    _moved_refused(code, stderr, back)
    import psycopg

    with psycopg.connect(pg_url) as look:
        assert look.execute("SELECT COUNT(*) FROM reviews").fetchone()[0] == 0
        assert look.execute("SELECT status FROM jobs WHERE key = 'style'").fetchone()[0] == (
            "awaiting_review"
        )
    # the decision is taken where the work is now
    there = {"AFC_LEDGER": str(back)}
    assert afc("review", *decision[:1], "style", *decision[1:], env=there).returncode == 0


def test_a_cancel_waiting_on_the_copys_lock_is_refused_once_the_source_is_moved(
    afc, pg_url, monkeypatch
):
    """A cancel that waited on the copy's lock committed on the moved source: the user was
    told 'cancelled' while the destination's next run rendered and paid for the job."""
    log = afc.cwd / "calls.log"
    env = {"AFC_LEDGER": pg_url, "AFC_LOCAL_CALL_LOG": str(log)}
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml", "--no-run", env=env).returncode == 0
    back = afc.cwd / "back.db"
    code, stderr = _copy_held_until_waited_on(
        lambda: afc.popen("cancel", "shot-002", env=env), pg_url, back, monkeypatch
    )
    _moved_refused(code, stderr, back)
    assert not log.exists()


def test_a_retry_waiting_on_the_copys_lock_is_refused_once_the_source_is_moved(
    afc, pg_url, monkeypatch
):
    env = {"AFC_LEDGER": pg_url}
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml", "--no-run", env=env).returncode == 0
    assert afc("cancel", "shot-002", env=env).returncode == 0
    back = afc.cwd / "back.db"
    code, stderr = _copy_held_until_waited_on(
        lambda: afc.popen("retry", "shot-002", env=env), pg_url, back, monkeypatch
    )
    _moved_refused(code, stderr, back)


def test_an_admission_waiting_on_the_copys_lock_is_refused_once_the_source_is_moved(
    afc, pg_url, monkeypatch
):
    """'afc submit --no-run' of new jobs during the copy: admitted into the moved source
    (exit 0), so no ledger would ever run them."""
    env = {"AFC_LEDGER": pg_url}
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml", "--no-run", env=env).returncode == 0
    afc.write_manifest(manifest(jobs(3)))
    back = afc.cwd / "back.db"
    code, stderr = _copy_held_until_waited_on(
        lambda: afc.popen("submit", "manifest.yaml", "--no-run", env=env),
        pg_url,
        back,
        monkeypatch,
    )
    _moved_refused(code, stderr, back)


def test_a_decision_waiting_on_a_sqlite_copys_write_lock_is_refused_once_moved(afc, monkeypatch):
    """The same on a SQLite source, whose copy holds the write lock: the decision's
    transaction began once the copy committed the move, and wrote it into the source."""
    import threading

    from afc_cli import review
    from afc_cli.errors import UsageError
    from afc_cli.ledger import Ledger
    from afc_cli.ledger import copy as copy_mod

    style_manifest(afc)
    assert afc("submit", "manifest.yaml").returncode == 0
    source, back = afc.cwd / "afc.db", afc.cwd / "back.db"
    outcome: dict = {}

    def decide() -> None:
        book = Ledger(source, create=False)
        try:
            outcome["decided"] = review.approve(book, ["style"], by="ana")
        except UsageError as exc:
            outcome["refused"] = exc.message
        finally:
            book.close()

    mark = copy_mod._mark_moved

    def mark_once_a_decision_waits(src, dst):
        outcome["thread"] = threading.Thread(target=decide)
        outcome["thread"].start()
        outcome["thread"].join(0.5)  # it waits for the copy's write lock
        assert outcome["thread"].is_alive()
        mark(src, dst)

    monkeypatch.setattr(copy_mod, "_mark_moved", mark_once_a_decision_waits)
    copy_mod.copy_ledger(str(source), str(back))
    outcome["thread"].join(60)
    assert "decided" not in outcome and f"was moved to {back}" in outcome["refused"]
    assert afc.rows("SELECT COUNT(*) FROM reviews") == [(0,)]


def test_two_reviewers_deciding_the_same_jobs_in_opposite_orders_record_one_decision(afc, pg_url):
    """'afc review approve x y' and 'afc review reject y x' at once on PostgreSQL: each
    locked its first job's row and waited for the other's, a deadlock the server broke by
    failing one of them with 'cannot write to the ledger ...: deadlock detected ... check the
    database server and the connection to it, then run afc resume' (exit 1), rather than
    the 'decided meanwhile' of a review race (exit 2). Both now lock their jobs in one order.
    Here the approval is held after its first job's update until the rejection waits on a
    row lock."""
    import threading

    import psycopg

    from afc_cli.errors import AfcError
    from afc_cli.ledger import Ledger, ReviewRace

    data = manifest(jobs(2))
    data["defaults"]["review"] = True
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", env={"AFC_LEDGER": pg_url}).returncode == 0
    first, second = Ledger(pg_url, create=False), Ledger(pg_url, create=False)
    outcome: dict = {}
    held, proceed = threading.Event(), threading.Event()
    execute = first.db.execute

    def held_after_first_update(sql, params=()):
        cursor = execute(sql, params)
        if sql.startswith("UPDATE jobs SET") and not held.is_set():
            held.set()
            proceed.wait(30)
        return cursor

    first.db.execute = held_after_first_update

    def decide(name, ledger, keys, decision):
        try:
            ledger.decide_reviews(
                [ledger.jobs_by_key(key)[0] for key in keys], decision, by=name, note="n"
            )
            outcome[name] = "decided"
        except ReviewRace:
            outcome[name] = "race"
        except AfcError as exc:
            outcome[name] = f"error: {exc.message}"

    approving = threading.Thread(
        target=decide, args=("ana", first, ["shot-001", "shot-002"], "approved")
    )
    rejecting = threading.Thread(
        target=decide, args=("ben", second, ["shot-002", "shot-001"], "rejected")
    )
    try:
        race_on_a_lock(pg_url, approving, rejecting, held, proceed)
    finally:
        first.close()
        second.close()
    assert sorted(outcome.values()) == ["decided", "race"], outcome
    with psycopg.connect(pg_url) as look:
        deciders = look.execute("SELECT DISTINCT decided_by FROM reviews").fetchall()
    assert len(deciders) == 1


def test_a_decision_in_afc_serve_where_the_os_user_has_no_name_is_recorded(afc, monkeypatch):
    """``afc serve`` in a container whose uid has no passwd entry and no USER or LOGNAME set
    (docker run --user 12345): Approve and Reject were a 500 with a traceback, nothing
    decided, since the server named the decider by ``getpass.getuser()`` alone, where
    ``afc review`` falls back to the uid (``ops.who``)."""
    import pwd

    pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")
    import asyncio

    import httpx
    from browser import awaiting

    from afc_cli.web.server import build_app

    awaiting(afc, 2)
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)

    def no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    app = build_app(str(afc.cwd / "afc.db"), batch=None, host="127.0.0.1", token=None)
    form = {"batch": "b1", "form_token": app.state.form_token}

    async def decide() -> list:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return [
                await client.post("/review/approve", data={**form, "key": "shot-001"}),
                await client.post(
                    "/review/reject", data={**form, "key": "shot-002", "reason": "too dark"}
                ),
            ]

    for answer in asyncio.run(decide()):
        assert answer.status_code == 303, answer.text
    decided = dict(afc.rows("SELECT decision, decided_by FROM reviews"))
    uid = f"uid {__import__('os').getuid()} (afc serve)"
    assert decided == {"approved": uid, "rejected": uid}


def test_a_reference_file_moved_and_named_anew_in_an_edited_job_list_is_read_there(afc, ledger_url):
    """The request hash covers an input file's SHA-256, not its path: a file moved, and the
    job list edited to name its new place, is the same request (a replay). The job, not yet
    rendered, kept the path it was admitted with, so its run read the old place, gone, and
    failed it (INPUT_UNAVAILABLE: 'restore it, then afc retry'), retried or re-submitted
    alike, while the manifest named a file with exactly the admitted bytes."""
    import json

    from afc_cli.providers.local import render_png

    env = {"AFC_LEDGER": ledger_url}
    (afc.cwd / "refs").mkdir()
    palette = render_png("palette", 16, 16)
    (afc.cwd / "refs" / "palette.png").write_bytes(palette)
    data = manifest([])
    del data["jobs"]
    data["jobs_from"] = "shots.jsonl"
    afc.write_manifest(data)

    def job_list(where: str) -> None:
        lines = [
            {"key": "frame", "prompt": "harbour", "inputs": [{"path": where}]},
            {"key": "shot", "prompt": "a boat", "inputs": [{"job": "frame"}, {"path": where}]},
        ]
        (afc.cwd / "shots.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))

    job_list("refs/palette.png")
    assert afc("submit", "manifest.yaml", "--no-run", env=env).returncode == 0
    (afc.cwd / "assets").mkdir()
    (afc.cwd / "refs" / "palette.png").rename(afc.cwd / "assets" / "palette.png")
    job_list("assets/palette.png")
    plan = afc.json("plan", "manifest.yaml", env=env)
    assert (plan["replayed"], plan["to_render"]) == (2, 2)
    done = afc.json("submit", "manifest.yaml", env=env, expect=None)
    assert done["exit_code"] == 0, done
    assert done["counts"] == {"succeeded": 2}
    shown = afc.json("show", "shot", env=env)
    sent = [item["sha256"] for item in shown["attempts"][0]["inputs"]]
    assert sent[1] == hashlib.sha256(palette).hexdigest()
