"""Crash tests: a real ``afc`` child process SIGKILLed, then ``afc resume`` finishes the work.

Timed kills land before, during and after renders; named crash points (AFC_CRASH_POINT) pin the
narrow windows between a side effect and its checkpoint.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time

import pytest
from conftest import jobs, manifest

N_JOBS = 12


def _count(afc, sql: str) -> int:
    if not (afc.cwd / "afc.db").exists():
        return 0
    try:
        return afc.rows(sql)[0][0]
    except sqlite3.OperationalError:  # the child is still creating the schema
        return 0


def _kill_when(afc, args: list[str], sql: str, threshold: int, extra_delay: float = 0.0) -> int:
    """Start afc, wait until the ledger shows ``sql >= threshold``, then SIGKILL it."""
    proc = afc.popen(*args)
    deadline = time.time() + 30
    while time.time() < deadline and proc.poll() is None:
        if _count(afc, sql) >= threshold:
            break
        time.sleep(0.01)
    time.sleep(extra_delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    return proc.returncode


ADMITTED = "SELECT COUNT(*) FROM jobs"
RENDERING = "SELECT COUNT(*) FROM attempts WHERE status = 'started'"
SUCCEEDED = "SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'"
SPOOLED = "SELECT COUNT(*) FROM steps WHERE step = 'spool'"


def _assert_all_done_once(afc, n: int) -> None:
    statuses = afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status")
    assert statuses == [("succeeded", n)], statuses
    # exactly one output per job, and nothing half-written left beside them
    objects = sorted(p.name for p in (afc.outputs() / "b1").iterdir())
    expected = sorted(
        [f"shot-{i:03d}.png" for i in range(1, n + 1)]
        + [f"shot-{i:03d}.png.afc.json" for i in range(1, n + 1)]
    )
    assert [o for o in objects if not o.startswith(".")] == expected
    # every attempt row accounted for: none left started
    assert afc.rows("SELECT COUNT(*) FROM attempts WHERE status = 'started'") == [(0,)]
    # no job rendered again once its spool or output existed: one successful render per job
    per_job = afc.rows(
        "SELECT j.key, SUM(a.status = 'succeeded') FROM jobs j"
        " LEFT JOIN attempts a ON a.job_id = j.id GROUP BY j.key"
    )
    for key, succeeded in per_job:
        assert succeeded == 1, (key, succeeded)
    # the only other attempts are the ones a kill interrupted: unknown, never dropped
    others = afc.rows("SELECT DISTINCT status FROM attempts WHERE status != 'succeeded'")
    assert set(others) <= {("unknown",)}
    assert list((afc.cwd / "afc.db-spool").glob("*.spool")) == []


@pytest.mark.parametrize(
    "kills",
    [
        [(ADMITTED, N_JOBS, 0.0)],  # before renders
        [(RENDERING, 2, 0.1)],  # during renders
        [(SUCCEEDED, 3, 0.0)],  # after some renders finished
        [(SPOOLED, 5, 0.0), (RENDERING, 1, 0.05)],  # after spools, then again mid-resume
        [(RENDERING, 1, 0.0), (RENDERING, 1, 0.2), (SUCCEEDED, N_JOBS - 2, 0.0)],
    ],
    ids=["before", "during", "after", "spooled-then-resume", "three-kills"],
)
def test_sigkill_at_several_instants_then_resume(afc, kills):
    afc.write_manifest(manifest(jobs(N_JOBS, latency_s=0.25)))
    args = ["submit", "manifest.yaml", "--concurrency", "4"]
    for i, (sql, threshold, extra) in enumerate(kills):
        run = args if i == 0 else ["resume", "--concurrency", "4"]
        code = _kill_when(afc, run, sql, threshold, extra)
        assert code == -signal.SIGKILL, "the child should still have been running"
    final = afc("resume", "--concurrency", "4")
    assert final.returncode == 0, final.stderr
    _assert_all_done_once(afc, N_JOBS)
    unknown = afc.rows("SELECT COUNT(*) FROM attempts WHERE status = 'unknown'")[0][0]
    adopted = afc.rows(
        "SELECT COUNT(*) FROM attempts WHERE error_message LIKE 'adopted%'"
        " OR error_message LIKE 'found stored after the process ended%'"
    )[0][0]
    marked = afc.rows("SELECT COUNT(*) FROM events WHERE kind = 'attempt_unknown'")[0][0]
    # every attempt a kill interrupted was marked unknown; the ones whose spool had landed
    # were then adopted as succeeded instead of being rendered again, and so were the ones
    # whose output the killed run had stored before its checkpoint (found by the probe: a
    # kill in that window made this test fail about one run in ten, its count left out)
    assert unknown + adopted == marked


def test_crash_after_spool_adopts_it_without_rendering_again(afc):
    afc.write_manifest(manifest(jobs(1)))
    died = afc("submit", "manifest.yaml", env={"AFC_CRASH_POINT": "after_spool"})
    assert died.returncode == -signal.SIGKILL
    assert list((afc.cwd / "afc.db-spool").glob("*.spool"))
    # the answer's known cost was committed on the attempt before the spool file was written
    # (found by outside audits 26e and 26f: without a budget it died with the process, and
    # the adopted attempt was left unpriced)
    assert afc.rows("SELECT status, cost_micros FROM attempts") == [("started", 50_000)]
    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    rows = afc.rows("SELECT number, status, cost_micros FROM attempts")
    assert rows == [(1, "succeeded", 50_000)], "adopted: no second render, at its known cost"
    _assert_all_done_once(afc, 1)


def test_a_plan_after_a_crash_prices_no_render_whose_bytes_are_in_the_spool(afc):
    """``afc plan`` after a run killed with a paid render in the spool: the resume stores
    it without paying again, and the plan said 'render' and priced it (its job listed in
    the manifest, or left out of it and run with it all the same)."""
    afc.write_manifest(manifest(jobs(1)))
    died = afc("submit", "manifest.yaml", env={"AFC_CRASH_POINT": "after_spool"})
    assert died.returncode == -signal.SIGKILL
    planned = afc.json("plan", "manifest.yaml")
    assert (planned["to_render"], planned["resumed"], planned["estimated_spend"]) == (
        0,
        1,
        "0.000000",
    )
    [job] = planned["jobs"]
    assert job["action"] == "store (its paid render is in this host's spool)"
    text = afc("plan", "manifest.yaml").stdout
    assert "paid renders resumed (stored or polled, not paid again): 1" in text, text
    other = manifest([{"key": "another", "prompt": "p"}])
    afc.write_manifest(other, name="other.yaml")
    planned = afc.json("plan", "other.yaml")
    assert (planned["to_render"], planned["resumed"], planned["estimated_spend"]) == (
        1,
        1,
        "0.050000",
    )
    assert planned["unlisted"] == ["shot-001"]
    assert planned["jobs"][-1]["action"] == (
        "store (its paid render is in this host's spool) (not in this manifest)"
    )
    assert afc("resume").returncode == 0
    assert afc.rows("SELECT number, status FROM attempts") == [(1, "succeeded")]


def test_crash_after_attempt_row_marks_it_unknown_and_retries(afc):
    afc.write_manifest(manifest(jobs(1)))
    died = afc("submit", "manifest.yaml", env={"AFC_CRASH_POINT": "after_attempt_row"})
    assert died.returncode == -signal.SIGKILL
    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    rows = afc.rows("SELECT number, status, cost_micros FROM attempts ORDER BY number")
    assert rows == [(1, "unknown", None), (2, "succeeded", 50000)]
    story = afc.json("show", "shot-001")
    assert "may have charged" in story["attempts"][0]["error"]


def test_crash_after_store_finishes_without_render_or_second_object(afc):
    afc.write_manifest(manifest(jobs(2)))
    died = afc(
        "submit", "manifest.yaml", "--concurrency", "1", env={"AFC_CRASH_POINT": "after_store"}
    )
    assert died.returncode == -signal.SIGKILL
    stored = {path.stem for path in afc.outputs().rglob("*.png")}  # killed after a store
    assert stored
    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    _assert_all_done_once(afc, 2)
    rows = dict(
        afc.rows(
            "SELECT j.key, a.cost_micros || ' ' || a.cost_source FROM attempts a"
            " JOIN jobs j ON j.id = a.job_id"
        )
    )
    # Found by an outside audit: the attempt was adopted from its spool file (cost unknown)
    # though the object stored before the crash records what it cost
    for key in stored:
        assert rows.pop(key) == "50000 local", (key, rows)
    # A job not stored at the kill, rendered once the first had spooled (its render slot was
    # free), may have landed in the spool before the kill and its checkpoint not: adopted
    # from the spool, its cost is then unknown, as README says for a run without a budget
    assert all(cost in ("50000 local", None) for cost in rows.values()), rows


def test_live_owner_keeps_its_jobs(afc):
    """A second run while the first is alive takes none of its jobs (the lease holds)."""
    afc.write_manifest(manifest(jobs(2, latency_s=6)))
    first = afc.popen("submit", "manifest.yaml")
    try:
        deadline = time.time() + 20
        while time.time() < deadline:
            if _count(afc, RENDERING) == 2:
                break
            time.sleep(0.05)
        second = afc.json("resume", expect=1)
        assert {j["status"] for j in second["jobs"]} == {"running"}
    finally:
        assert first.wait(timeout=30) == 0
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(2,)]


def test_an_attempt_whose_end_was_lost_after_its_output_was_stored_is_adopted_at_its_cost(afc):
    """A run killed after it stored an output and removed its spool file, before the group
    commit of the attempt's end and the job's last steps: the next run finds the output
    stored and the attempt cut off. The object's metadata names the attempt and its cost,
    so it is recorded succeeded at that cost, not left unknown (seen under load in the
    SIGKILL-loop test: 48 succeeded attempts for 50 stored outputs)."""
    log = afc.cwd / "calls.log"
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml", env={"AFC_LOCAL_CALL_LOG": str(log)}).returncode == 0
    # the ledger as the lost commit left it: the attempt started, the job at render, held by
    # a process that is gone
    conn = sqlite3.connect(afc.cwd / "afc.db")
    with conn:
        conn.execute(
            "UPDATE attempts SET status = 'started', ended_at = NULL, cost_micros = NULL,"
            " cost_source = NULL, usage_json = NULL, owner = 'ghost:1:1'"
        )
        conn.execute(
            "UPDATE jobs SET status = 'running', step = 'render', outcome = NULL,"
            " lease_owner = 'ghost:1:1', lease_expires = 0"
        )
        conn.execute("DELETE FROM steps WHERE step != 'probe'")
    conn.close()
    resumed = afc("resume", env={"AFC_LOCAL_CALL_LOG": str(log)})
    assert resumed.returncode == 0, resumed.stderr
    assert len(log.read_text().splitlines()) == 1, "nothing rendered again"
    rows = afc.rows("SELECT status, error_class, cost_micros FROM attempts")
    assert rows == [("succeeded", None, 50000)], rows
    assert afc.json("status")["jobs"][0]["attempts"] == 1


def _left_call_is_counted(afc) -> None:
    """Every total shows the cancelled job's possibly paid call as unpriced, never as 0."""
    total = afc.json("costs", "report")["total"]
    assert (total["unpriced_attempts"], total["unknown_attempts"]) == (1, 1), total
    [job] = afc.json("status", "--all")["jobs"]
    assert (job["status"], job["cost"], job["unpriced_attempts"]) == ("cancelled", None, 1)
    shown = afc.json("show", "shot-001")["job"]
    assert (shown["cost"], shown["unpriced_attempts"]) == (None, 1)
    notes = afc("costs", "report").stderr  # on a pipe the notes go to stderr
    assert "1 attempt has an unknown outcome (afc never saw the call end" in notes


def test_a_cancel_after_a_crash_mid_call_marks_the_call_unknown(afc):
    """No run takes a cancelled job over, so the cancel marks the dead run's call unknown
    (possibly paid) itself: it is never left started, out of every total."""
    afc.write_manifest(manifest(jobs(1)))
    died = afc("submit", "manifest.yaml", env={"AFC_CRASH_POINT": "after_attempt_row"})
    assert died.returncode == -signal.SIGKILL
    assert afc("cancel", "shot-001").returncode == 0
    afc("resume")
    assert afc.rows("SELECT status, error_class FROM attempts") == [("unknown", "interrupted")]
    _left_call_is_counted(afc)


def test_a_run_stopped_after_its_job_was_cancelled_mid_call_marks_that_call_unknown(afc):
    """Found by a review: the cancel left the call to its live run (right), which then
    abandoned it at a SIGTERM, but marked only the calls of jobs it still held: the cancelled
    job's call stayed started, out of the run's own summary."""
    release = afc.cwd / "release"
    afc.write_manifest(manifest(jobs(2)))
    proc = subprocess.Popen(
        afc.command("submit", "manifest.yaml", "--grace", "0.5", "--json"),
        cwd=afc.cwd,
        env={**afc.env, "AFC_LOCAL_RELEASE": str(release)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 30
        while _count(afc, RENDERING) < 2 and time.time() < deadline:
            time.sleep(0.01)
        assert afc("cancel", "shot-001").returncode == 0
        proc.send_signal(signal.SIGTERM)
        out, _err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert afc.rows("SELECT DISTINCT status FROM attempts") == [("unknown",)]
    summary = json.loads(out)
    assert summary["abandoned_attempts"] == 2 and summary["unknown_cost_attempts"] == 2


def test_a_call_left_started_by_a_cancelled_jobs_run_that_died_is_counted(afc):
    """Cancelled mid-call while its run lived (the call is that run's to record), then the
    run died before the answer came: the call stays started for ever, and counts as possibly
    paid, unpriced."""
    release = afc.cwd / "release"
    afc.write_manifest(manifest(jobs(1)))
    proc = afc.popen("submit", "manifest.yaml", env={"AFC_LOCAL_RELEASE": str(release)})
    try:
        deadline = time.time() + 30
        while _count(afc, RENDERING) < 1 and time.time() < deadline:
            time.sleep(0.01)
        assert afc("cancel", "shot-001").returncode == 0
        assert afc.rows("SELECT status FROM attempts") == [("started",)]  # its run lives
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    afc("resume")
    assert afc.rows("SELECT status FROM attempts") == [("started",)]
    _left_call_is_counted(afc)


def test_renders_wait_for_the_spool_before_more_are_paid_for(afc):
    """Paid bytes wait in memory, where a crash loses them, for at most --concurrency jobs
    beside the spool's own slots (64): a job gives its render slot back only once it holds a
    spool slot. It gave it back first, so with the spool's writes hung (here the first jobs'
    ``.part`` files are FIFOs that no one reads: every writer of the file helper blocks, as on
    a hung disk) every job of the run went on rendering into memory, and a SIGKILL left them
    all to be paid for again (an outside audit: 657 of a 10,000-job run at 32 wide)."""
    import os

    calls = afc.cwd / "calls.log"
    afc.write_manifest(manifest(jobs(300)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    spool = afc.cwd / "afc.db-spool"
    spool.mkdir(exist_ok=True)
    for (job_id,) in afc.rows("SELECT id FROM jobs ORDER BY seq LIMIT 20"):
        os.mkfifo(spool / f"{job_id}.part")
    run = afc.popen("resume", "--concurrency", "4", env={"AFC_LOCAL_CALL_LOG": str(calls)})
    try:
        deadline, rendered, settled = time.time() + 60, -1, time.time()
        while time.time() - settled < 2:  # until no render has been paid for in 2 s
            assert time.time() < deadline and run.poll() is None
            time.sleep(0.2)
            now = calls.read_text().count("\n") if calls.exists() else 0
            if now != rendered:
                rendered, settled = now, time.time()
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
    spooled = len(list(spool.glob("*.spool")))
    stored = afc.rows("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'")[0][0]
    # renders paid for whose bytes were neither spooled nor stored: lost to the SIGKILL
    assert 20 <= rendered and rendered - spooled - stored <= 4 + 64, (rendered, spooled, stored)
