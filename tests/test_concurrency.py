"""Concurrency, leases, interruption, cancel, limits and queue stats."""

from __future__ import annotations

import asyncio
import shutil
import signal
import time
from pathlib import Path

import pytest
from conftest import frozen_at, jobs, manifest, stop_between_writes, wait_for

from afc_cli.ledger import MAX_TAKEOVERS, Ledger
from afc_cli.pipeline import ProviderLimit


def test_two_resumes_at_once_render_every_job_exactly_once(afc):
    log = afc.cwd / "calls.log"
    afc.write_manifest(manifest(jobs(30, latency_s=0.1)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    env = {"AFC_LOCAL_CALL_LOG": str(log)}
    first = afc.popen("resume", "--concurrency", "4", env=env)
    second = afc.popen("resume", "--concurrency", "4", env=env)
    assert first.wait(timeout=60) in (0, 1)
    assert second.wait(timeout=60) in (0, 1)
    final = afc.json("resume")  # anything either left (a job the other held) finishes here
    assert final["exit_code"] == 0
    calls = log.read_text().split("\n")[:-1]
    assert len(calls) == 30, "every job rendered exactly once"
    assert len({c.split()[0] for c in calls}) == 30
    assert afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("succeeded", 30)]
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(30,)]


def test_sigkill_worker_lease_is_taken_over(afc):
    afc.write_manifest(manifest(jobs(4, latency_s=0.5)))
    proc = afc.popen("submit", "manifest.yaml")
    wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    held = afc.rows("SELECT COUNT(*) FROM jobs WHERE lease_owner IS NOT NULL")[0][0]
    assert held >= 2, "the dead worker's leases are still in the ledger"
    assert afc("resume").returncode == 0
    assert afc.rows("SELECT COUNT(*) FROM events WHERE kind = 'takeover'")[0][0] == held
    assert afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("succeeded", 4)]


def test_cancelled_queued_job_is_never_rendered(afc):
    log = afc.cwd / "calls.log"
    afc.write_manifest(manifest(jobs(3)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    result = afc.json("cancel", "shot-002")
    assert result["cancelled"] == [{"key": "shot-002", "batch": "b1"}]
    resumed = afc("resume", env={"AFC_LOCAL_CALL_LOG": str(log)})
    assert resumed.returncode == 0
    called = {line.split()[0] for line in log.read_text().splitlines()}
    cancelled_id = afc.rows("SELECT id FROM jobs WHERE key = 'shot-002'")[0][0]
    assert cancelled_id not in called and len(called) == 2
    assert afc.rows("SELECT status FROM jobs WHERE key = 'shot-002'") == [("cancelled",)]
    # submitting again does not bring it back; cancelling again changes nothing
    again = afc.json("submit", "manifest.yaml", expect=1)
    assert {j["key"]: j["status"] for j in again["jobs"]}["shot-002"] == "cancelled"
    assert afc.json("cancel", "shot-002")["already_final"][0]["status"] == "cancelled"
    assert afc("cancel", "nope").returncode == 2


def test_cancel_mid_render_wins_and_the_late_result_is_recorded(afc):
    afc.write_manifest(manifest([{"key": "long", "prompt": "p"}]))
    release = afc.cwd / "release"  # the render returns when this file exists
    proc = afc.popen("submit", "manifest.yaml", env={"AFC_LOCAL_RELEASE": str(release)})
    wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 1)
    assert afc.json("cancel", "long")["cancelled"]
    release.touch()
    assert proc.wait(timeout=30) == 1
    assert afc.rows("SELECT status FROM jobs") == [("cancelled",)]
    # the provider succeeded after the cancel: the paid attempt is recorded with its cost
    assert afc.rows("SELECT status, cost_micros FROM attempts") == [("succeeded", 50000)]
    story = afc.json("show", "long")
    [late] = [e["detail"] for e in story["events"] if e["kind"] == "late_result_stored"]
    assert Path(late["spool"]).exists(), "the paid output is kept in the spool"
    # ... and stored as the job's own, so a retry run on any host finds it (found by an
    # audit of workers on several hosts: another host's retry rendered and paid again)
    assert (afc.outputs() / "b1" / "long.png").exists() and late["url"].endswith("long.png")
    assert afc.json("resume")["jobs"] == []
    assert afc.json("outputs")["outputs"] == [], "a cancelled job lists no output"
    shutil.rmtree(Path(late["spool"]).parent)  # a host without that spool
    assert afc("retry", "long").returncode == 0
    resumed = afc.json("resume")
    assert [j["status"] for j in resumed["jobs"]] == ["succeeded"]
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(1,)], "nothing paid again"


def test_cancel_a_whole_batch(afc):
    afc.write_manifest(manifest(jobs(3)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    # more than one job: asked first; without a terminal, --yes is needed (nothing changes)
    refused = afc("cancel", "--batch", "b1")
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert afc.rows("SELECT DISTINCT status FROM jobs") == [("queued",)]
    result = afc.json("cancel", "--batch", "b1", "--yes")
    assert len(result["cancelled"]) == 3
    assert afc("cancel").returncode == 2


def test_queue_stats_and_fail_if(afc):
    afc.write_manifest(manifest(jobs(3)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    stats = afc.json("queue", "stats")
    assert stats == {
        "queued": 3,
        "in_flight": 0,
        "delayed": 0,
        "dlq": 0,
        "failed": 0,
        "oldest_age_seconds": stats["oldest_age_seconds"],
        # review gates and needs (issue 17)
        "blocked": 0,
        "awaiting_review": 0,
        "oldest_review_age_seconds": 0,
        "process_gone": 0,  # outside audit 18: a killed run's jobs
        "stuck": 0,  # outside audit 21: failed or dead, waiting for a person
    }
    assert stats["oldest_age_seconds"] >= 0
    assert afc("queue", "stats", "--fail-if", "dlq>0").returncode == 0
    alert = afc("queue", "stats", "--fail-if", "dlq>0,queued>=3")
    assert alert.returncode == 1 and "queued=3" in alert.stderr
    assert afc("queue", "stats", "--fail-if", "queued>>1").returncode == 2
    # an empty condition (an unset variable in a cron line) would never alert: refused
    for empty in ("", " , "):
        refused = afc("queue", "stats", "--fail-if", empty)
        assert refused.returncode == 2 and "names no condition" in refused.stderr
    assert afc("resume").returncode == 0
    assert afc.json("queue", "stats")["queued"] == 0


def test_provider_concurrency_limit(afc):
    data = manifest(jobs(4, latency_s=0.2), limits={"local": {"concurrency": 1}})
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", "--concurrency", "8").returncode == 0
    spans = sorted(afc.rows("SELECT started_at, ended_at FROM attempts"))
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert start >= end - 0.01, "one local call at a time"
    bad = manifest(jobs(1), limits={"nope": {"concurrency": 1}})
    afc.write_manifest(bad, "bad.yaml")
    assert afc("submit", "bad.yaml").returncode == 2


def test_a_dead_processs_call_frees_its_limit_slot_at_once(afc):
    """Found by an outside audit: a SIGKILLed run's call held the provider's only slot
    (``limits: concurrency: 1``) until its lease ran out, 300 s, stalling every batch of the
    ledger, though its job was taken over at once."""
    held = manifest(jobs(1), batch="la", limits={"local": {"concurrency": 1}})
    afc.write_manifest(held, "a.yaml")
    proc = afc.popen("submit", "a.yaml", env={"AFC_LOCAL_RELEASE": str(afc.cwd / "never")})
    wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 1)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    other = manifest(jobs(1), batch="lb", limits={"local": {"concurrency": 1}})
    afc.write_manifest(other, "b.yaml")
    assert afc("submit", "b.yaml", "--no-run", "-q").returncode == 0
    result = afc("resume", "--batch", "lb", timeout=30)
    assert result.returncode == 0, result.stderr
    assert afc.rows("SELECT status FROM jobs WHERE batch = 'lb'") == [("succeeded",)]


def test_per_minute_limit_waits_without_sleeping_for_real():
    now = [1000.0]
    waits = []

    async def fake_sleep(seconds):
        waits.append(seconds)
        now[0] += seconds

    async def main():
        limit = ProviderLimit(per_minute=2, clock=lambda: now[0])
        for _ in range(3):
            await limit.acquire(fake_sleep)
            limit.release()
            now[0] += 1

    asyncio.run(main())
    assert waits == [pytest.approx(58.0)]


def test_crash_looping_job_is_dead_lettered(afc):
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    ledger = Ledger(afc.cwd / "afc.db")
    try:
        job_id = afc.rows("SELECT id FROM jobs")[0][0]
        for i in range(MAX_TAKEOVERS + 1):
            with ledger.tx():
                ledger.db.execute(
                    "UPDATE jobs SET lease_owner = ?, lease_expires = 0 WHERE id = ?",
                    (f"elsewhere:{i}:1", job_id),
                )
            claimed = ledger.claim(job_id, 60)
            if i < MAX_TAKEOVERS:
                assert claimed is not None
        assert claimed is None
        job = ledger.job(job_id)
        assert job["status"] == "dead" and job["error_code"] == "CRASH_LOOP"
    finally:
        ledger.close()
    stats = afc.json("queue", "stats")
    assert stats["dlq"] == 1


def test_a_process_that_lost_its_job_to_a_takeover_says_so(afc):
    """Found by an outside audit: a run stalled past its lease, whose job another host took
    over and was still working on, ended its line with 'ended running', as if it had left
    the job running itself."""
    afc.write_manifest(manifest(jobs(1)))
    release_a, release_b = afc.cwd / "release-a", afc.cwd / "release-b"
    env_a = {"AFC_LEASE_S": "3", "AFC_LOCAL_RELEASE": str(release_a), "AFC_HOST_ID": "host-a"}
    env_b = {"AFC_LEASE_S": "3", "AFC_LOCAL_RELEASE": str(release_b), "AFC_HOST_ID": "host-b"}
    stalled = afc.popen("submit", "manifest.yaml", env=env_a)
    wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 1)
    stop_between_writes(afc, stalled)
    try:
        time.sleep(3.5)  # past its 3 s lease: host-b may take the job over
        other = afc.popen("resume", env=env_b)
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 1)
        wait_for(afc, "SELECT COUNT(*) FROM attempts", 2)  # host-b's call, held
        release_a.touch()
    finally:
        stalled.send_signal(signal.SIGCONT)
    _, err = stalled.communicate(timeout=60)
    release_b.touch()
    assert other.wait(timeout=60) == 0, other.stderr.read()
    assert "b1/shot-001: ended here: taken over by another afc process" in err, err
    assert "ended running" not in err
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]


def test_a_store_that_finds_another_render_of_its_own_request_adopts_it(afc):
    """Two renders of one job (a run stalled past its lease, its job taken over): the first
    to land at the output key is the job's output. The other run's store found it (the job's
    own: same job id and request hash) but verified it against its own render's checksum,
    and failed the job VERIFY_FAILED though a valid output was stored."""
    import hashlib

    from afc_cli.storage.file import FileStorage

    afc.write_manifest(manifest(jobs(1)))
    release = afc.cwd / "release"
    proc = afc.popen("submit", "manifest.yaml", env={"AFC_LOCAL_RELEASE": str(release)})
    wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 1)
    job_id, key, request_hash = afc.rows("SELECT id, output_key, request_hash FROM jobs")[0]
    other = afc.cwd / "other.png"  # the stalled run's render, stored first
    other.write_bytes(b"\x89PNG another render of the same request")
    data = other.read_bytes()
    meta = {
        "job_id": job_id,
        "key": "shot-001",
        "batch": "b1",
        "request_hash": request_hash,
        "attempt": 1,
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": len(data),
    }
    FileStorage(str(afc.outputs())).put_if_absent(key, other, meta)
    release.touch()
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    assert afc.rows("SELECT status, output_sha256 FROM jobs") == [
        ("succeeded", hashlib.sha256(data).hexdigest())
    ]
    assert (afc.outputs() / key).read_bytes() == data


def _taken_over_while_frozen_before_the_send(
    afc, env: dict[str, str], point: str = "before_request"
) -> None:
    """Run one job on host-a frozen at ``point`` (after its attempt row; by default after
    the render step's own look too), past its 3 s lease, while host-b takes the job over and
    renders it; then wake host-a."""
    env = {**env, "AFC_LEASE_S": "3"}
    frozen = afc.popen(
        "submit",
        "manifest.yaml",
        env={**env, "AFC_HOST_ID": "host-a", "AFC_STALL_POINT": point},
    )
    try:
        frozen_at(frozen)
        time.sleep(3.5)  # past its 3 s lease
        other = afc("resume", env={**env, "AFC_HOST_ID": "host-b"})
        assert other.returncode == 0, other.stderr
    finally:
        frozen.send_signal(signal.SIGCONT)
    frozen.communicate(timeout=60)
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]
    # host-a's attempt: marked unknown by the takeover, its cost now known to be nothing
    assert afc.rows(
        "SELECT number, status, cost_micros, cost_source FROM attempts ORDER BY number"
    )[0] == (1, "unknown", 0, "unsent")
    assert afc.rows("SELECT number, status FROM attempts ORDER BY number") == [
        (1, "unknown"),
        (2, "succeeded"),
    ]


@pytest.mark.parametrize("point", ["after_attempt_row", "before_request"])
def test_a_process_frozen_before_its_request_does_not_send_it_once_taken_over(afc, point):
    """Found by bench/chaos.py --postgres: a worker frozen between its attempt row and its
    paid request, its job taken over (and rendered) by another host, sent the request when it
    woke and paid for the job a second time, after it had succeeded. The render step's look
    after the attempt row then came before the request was built and sent (a job-style
    call's task scheduled later, reference images read and encoded): frozen after it
    (``before_request``), a process sent the request on waking all the same. The look is now
    the adapter's, with nothing awaited between it and the send (AttemptRequest.last_look).
    Each HTTP adapter: the next test."""
    afc.write_manifest(manifest(jobs(1)))
    calls = afc.cwd / "calls.log"
    _taken_over_while_frozen_before_the_send(afc, {"AFC_LOCAL_CALL_LOG": str(calls)}, point)
    assert len(calls.read_text().splitlines()) == 1, "host-b's call alone"


@pytest.mark.parametrize("provider", ["openai", "replicate", "fal", "gemini"])
def test_every_provider_takes_the_last_look_before_its_paid_request(afc, fake, provider):
    """Each HTTP adapter calls ``last_look`` right before its paid request: frozen past its
    lease and taken over, a run sends nothing when it wakes (one billed request in all)."""
    from test_providers import MODELS, RATES

    data = manifest([{"key": "j", "prompt": "one"}], rates=RATES)
    data["defaults"]["chain"] = [{"provider": provider, "model": MODELS[provider]}]
    afc.write_manifest(data)
    _taken_over_while_frozen_before_the_send(afc, {})
    assert [entry[1:] for entry in fake.log if entry[3]] == [(provider, "one", True)]


def test_a_process_that_wakes_past_its_lease_keeps_the_job_it_sends_the_request_for(afc):
    """Found by outside audit 24c: a run frozen past its lease whose job no one had taken
    over yet found it still its own at the last look and sent the request; another host
    that claimed the job in the moment before the woken run's heartbeat renewed its lease
    took it over (the lease had run out) and paid for it a second time. The last look now
    renews the lease in the same conditional write: host-b, frozen out here between the
    look and the send (AFC_STALL_POINT after_last_look), finds the job held and pays
    nothing."""
    afc.write_manifest(manifest(jobs(1)))
    calls = afc.cwd / "calls.log"
    env = {"AFC_LEASE_S": "3", "AFC_LOCAL_CALL_LOG": str(calls)}
    frozen = afc.popen(
        "submit",
        "manifest.yaml",
        env={
            **env,
            "AFC_HOST_ID": "host-a",
            "AFC_STALL_POINT": "before_request,after_last_look",
        },
    )
    try:
        frozen_at(frozen)
        time.sleep(3.5)  # past its 3 s lease, no one taking it over
        frozen.send_signal(signal.SIGCONT)
        time.sleep(0.3)
        frozen_at(frozen)  # woken, looked, and frozen again before the send
        other = afc("resume", env={**env, "AFC_HOST_ID": "host-b"})
        assert not calls.exists(), "host-b took the job over and paid for it"
        assert "being run by another afc process" in other.stdout + other.stderr
    finally:
        frozen.send_signal(signal.SIGCONT)
    assert frozen.wait(timeout=60) == 0, frozen.stderr.read()
    assert len(calls.read_text().splitlines()) == 1, "host-a's call alone"
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert afc.rows("SELECT number, status FROM attempts") == [(1, "succeeded")]


def test_a_job_cancelled_while_its_run_froze_before_the_request_records_it_unsent(afc):
    """The look at the job after a slow attempt-row commit (LEASE_RECHECK_S) found it
    cancelled and sent nothing, but left the attempt 'started' for ever: the cancel leaves a
    live run's attempt to that run, which wrote nothing. It is a failed attempt that cost
    nothing, as when the run begins stopping there."""
    afc.write_manifest(manifest(jobs(1)))
    calls = afc.cwd / "calls.log"
    frozen = afc.popen(
        "submit",
        "manifest.yaml",
        env={"AFC_LOCAL_CALL_LOG": str(calls), "AFC_STALL_POINT": "after_attempt_row"},
    )
    try:
        frozen_at(frozen)
        assert afc("cancel", "shot-001").returncode == 0
        time.sleep(1.2)
    finally:
        frozen.send_signal(signal.SIGCONT)
    frozen.communicate(timeout=60)
    assert not calls.exists() or calls.read_text() == "", "no request was sent"
    assert afc.rows("SELECT status FROM jobs") == [("cancelled",)]
    assert afc.rows("SELECT status, cost_micros FROM attempts") == [("failed", 0)]


def test_a_second_render_of_a_job_stands_back_from_a_file_store_in_progress(tmp_path):
    """Found by a review: a stalled run's late result stored (FileStorage.put_if_absent)
    while the run that took the job over was storing its own render. The metadata file is
    created first and the object second: the late one, finding the job's metadata, linked
    its own bytes under the other render's metadata, and the other run, finding an object
    that was not its render, removed the metadata, so the key read as foreign
    (OUTPUT_KEY_CONFLICT). A render whose checksum is not the metadata's now stands back."""
    import hashlib
    import json as jsonlib

    from afc_cli.storage import ObjectExists
    from afc_cli.storage.file import FileStorage

    storage = FileStorage(str(tmp_path / "out"))
    renders = {}
    for name in ("taken-over", "late"):
        path = tmp_path / f"{name}.png"
        path.write_bytes(b"\x89PNG " + name.encode())
        data = path.read_bytes()
        renders[name] = (
            path,
            {
                "job_id": "j",
                "request_hash": "h",
                "key": "k",
                "sha256": hashlib.sha256(data).hexdigest(),
                "size": len(data),
            },
        )
    key = "b1/k.png"
    storage._object(key).parent.mkdir(parents=True)
    # the run that took the job over has created its metadata, and not yet its object
    storage._create(storage._meta(key), data=jsonlib.dumps(renders["taken-over"][1]).encode())
    with pytest.raises(ObjectExists):
        storage.put_if_absent(key, *renders["late"])
    assert not storage._object(key).exists(), "the late render stood back"
    storage._create(storage._object(key), source=renders["taken-over"][0])  # its object next
    info = storage.head(key)
    assert info.exists and info.meta["sha256"] == renders["taken-over"][1]["sha256"]


def test_a_ledger_locked_past_the_busy_timeout_stops_the_run_once(afc):
    """Found by an outside audit: a sqlite3 shell (or a backup, a script) holding the ledger's
    write lock stopped a run only after every job that had a render slot waited its own busy
    timeout in turn, in the run loop's thread: --concurrency 8 took 4.5 minutes to exit, cron's
    32 took 16, while the wrapper's flock skipped the runs meant to follow."""
    import sqlite3

    afc.write_manifest(manifest(jobs(20)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    holder = sqlite3.connect(afc.cwd / "afc.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        result = afc("resume", "--concurrency", "8", timeout=150)
        took = time.monotonic() - started
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert result.returncode == 1, result.stderr
    assert "another process held the ledger's write lock too long" in result.stderr
    # one line, no traceback: the jobs that failed beside the first one are not left to
    # asyncio's "Task exception was never retrieved"
    assert "Traceback" not in result.stderr and "never retrieved" not in result.stderr
    assert took < 75, f"the run took {took:.0f}s to stop"  # one busy timeout (30 s), not 9
    assert afc("resume").returncode == 0  # the lock gone, the next run renders everything
    assert afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("succeeded", 20)]


def test_a_call_slot_comes_back_when_its_wait_for_the_minute_is_cancelled():
    """A job that took one of a provider's ``concurrency`` slots and then waits for a start of
    the minute (``per_minute``) may be cancelled there (a stopping run, its attempt's window
    over): the slot it held is given back. It was kept for the rest of the run, one call fewer
    at once each time (outside audit 54b)."""
    from afc_cli.pipeline import ProviderLimit

    async def main():
        limit = ProviderLimit(concurrency=1, per_minute=1, clock=lambda: 0.0)
        await limit.acquire(asyncio.sleep)
        limit.release()  # the minute's start is spent: the next waits 60 s
        waiting = asyncio.ensure_future(limit.acquire(asyncio.sleep))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert not limit.slots.locked(), "the one call slot was kept by a cancelled wait"

    asyncio.run(main())


def test_a_provider_slot_comes_back_when_its_job_is_cancelled_taking_its_worker_slot_back():
    """A job gives its ``--concurrency`` slot back while it waits for a provider's limit
    (``RunContext.provider_slot``), takes the limit, then waits for a worker slot again and
    is cancelled there (a stopping run, its attempt's window over): the provider's slot and
    the pace it took go back. They were kept for the rest of the run, one call of that
    provider fewer at once each time (an ``afc worker``'s fed loop runs on)."""
    from afc_cli.pipeline import ProviderLimit, RunContext, Slots

    async def main():
        ctx = RunContext(
            ledger=None,
            spool=None,
            storages={},
            rates={},
            slots=Slots(1),
            limits={"openai": ProviderLimit(concurrency=1)},
        )
        taken = asyncio.Event()

        async def job():
            async with ctx.slots, ctx.provider_slot("openai", "j"):
                pass

        async def other():  # takes the worker slot while the job waits for the limit
            await ctx.slots.acquire()
            taken.set()

        await ctx.slots.acquire()
        cut = asyncio.ensure_future(job())
        await asyncio.sleep(0)
        ctx.slots.release()  # held by the job now, given back in provider_slot's wait
        grab = asyncio.ensure_future(other())
        await taken.wait()
        cut.cancel()  # the job waits to take its worker slot back
        await asyncio.sleep(0)
        ctx.slots.release()  # the other gives it back: the job takes it, and ends cancelled
        with pytest.raises(asyncio.CancelledError):
            await cut
        await grab
        assert not ctx.limits["openai"].slots.locked(), "the provider's slot was kept"
        assert ctx.pace("openai").take(), "the provider's pace was kept"

    asyncio.run(main())


def test_a_slot_given_away_for_a_wait_is_taken_back_through_a_cancel():
    """``pipeline.taken_back``: the worker slot after a backoff (``RunContext.idle``) and a
    provider's call slot after a wait for an output key another job renders are taken back
    even when the task is cancelled meanwhile, the cancel raised once the slot is held: the
    holder's ``async with`` gives it back at its end all the same, and a slot given back
    unheld was one more call at once for the rest of the run."""
    from afc_cli.pipeline import taken_back

    async def main():
        slots = asyncio.Semaphore(1)
        await slots.acquire()  # another task holds the one slot
        back = asyncio.ensure_future(taken_back(slots.acquire))
        await asyncio.sleep(0)
        back.cancel()
        await asyncio.sleep(0)
        assert not back.done(), "it went on without its slot"
        slots.release()  # the other task's end
        with pytest.raises(asyncio.CancelledError):
            await back
        assert slots.locked(), "the cancelled task does not hold the slot it is to give back"

    asyncio.run(main())
