"""Interruptions never cost a job or a second payment; failed work is retried on purpose.

Through the real ``afc`` command: SIGTERM drains the calls in flight (stored, recorded, exit
130), a second signal abandons them, SIGKILL loops leave every job resumable, an interruption
never uses up a model's attempts, a request that never left costs a known 0, and ``afc retry``
queues failed, dead-lettered and cancelled jobs again.
"""

from __future__ import annotations

import random
import signal
import socket
import subprocess
import time

import pytest
from conftest import jobs, manifest, wait_for
from fakeproviders import FakeProviders
from test_pipeline import OneJob

from afc_cli.attempts import INTERRUPTED, PastAttempt, Try, counted, interrupted_last, next_try
from afc_cli.pipeline import run_job


def wait_line(proc: subprocess.Popen, text: str) -> list[str]:
    """Read the child's stderr until a line contains ``text`` (the child is not a terminal,
    so it writes plain lines)."""
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if text in line:
            return seen
    raise AssertionError(f"{text!r} never came; stderr was: {''.join(seen)}")


def statuses(afc) -> dict[str, int]:
    return dict(afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status"))


def calls(log) -> list[str]:
    return log.read_text().split("\n")[:-1] if log.exists() else []


STARTED = "SELECT COUNT(*) FROM attempts WHERE status = 'started'"
SUCCEEDED = ("succeeded", None, 50_000, "local")  # an attempt of the local provider, priced


# --- the attempt runner: interruptions don't count ---------------------------------------------


def row(number, status, cls=None, chain_index=0):
    return {
        "number": number,
        "chain_index": chain_index,
        "status": status,
        "error_class": cls,
        "provider": "local",
        "model": "m",
        "http_status": None,
        "error_message": None,
    }


def test_interrupted_attempts_never_use_up_a_models_attempts():
    chain = [{"provider": "local", "model": "m", "attempts": 1, "fallback_on": ["exhausted"]}]
    rows = [row(1, "unknown", INTERRUPTED), row(2, "unknown", INTERRUPTED)]
    assert counted(rows) == []
    assert next_try(chain, counted(rows), after_interrupt=interrupted_last(rows)) == Try(0, 0, None)
    # a real failure does count: one of one used, no model follows
    rows.append(row(3, "failed", "server"))
    assert len(counted(rows)) == 1
    assert next_try(chain, counted(rows)).__class__.__name__ == "GiveUp"
    # attempts before the last retry (base) no longer count either
    assert counted(rows, base=3) == []


def test_the_next_attempt_after_an_interruption_starts_without_a_wait():
    chain = [{"provider": "local", "model": "m", "attempts": 5, "backoff": {"base": 10, "cap": 60}}]
    rows = [row(1, "failed", "rate_limited"), row(2, "unknown", INTERRUPTED)]
    history = counted(rows)
    assert history == [PastAttempt(0, "failed", "rate_limited", "local", "m")]
    waited = next_try(chain, history, rand=lambda: 1.0)
    assert waited.delay == 10  # after the rate limit alone: a backoff
    resumed = next_try(chain, history, rand=lambda: 1.0, after_interrupt=interrupted_last(rows))
    assert resumed == Try(0, 0.0, INTERRUPTED)


def test_an_attempt_row_committed_as_the_run_stops_is_never_sent_and_costs_0(
    afc, tmp_path, monkeypatch
):
    """A stop that arrives between an attempt row's commit and its call: the request never
    leaves, so the attempt is a known 0 (not unknown) and the job stays queued."""
    log = tmp_path / "calls.log"
    one = OneJob(afc)
    ctx = one.context()
    committed = one.ledger.committed

    async def stop_while_committing():
        ctx.stopping.set()
        await committed()

    one.ledger.committed = stop_while_committing

    async def main():
        return await run_job(ctx, one.job_id)

    monkeypatch.setenv("AFC_LOCAL_CALL_LOG", str(log))
    assert one.run(main) == "queued"
    assert calls(log) == []
    assert afc.rows("SELECT status, error_class, cost_micros, cost_source FROM attempts") == [
        ("failed", INTERRUPTED, 0, "unsent")
    ]
    assert afc.rows("SELECT status, lease_owner FROM jobs") == [("queued", None)]


def test_a_finished_job_is_no_longer_counted_in_flight(afc):
    """What a stopping run waits for (``RunContext.protected``) is only the jobs still in a
    call or in their storage work, not the ones that ended."""
    one = OneJob(afc)
    ctx = one.context()

    async def main():
        status = await run_job(ctx, one.job_id)
        return status, set(ctx.protected)

    assert one.run(main) == ("succeeded", set())


# --- SIGTERM drains, a second signal abandons ----------------------------------------------------


def test_sigterm_drains_the_calls_in_flight_then_resume_renders_the_rest(afc):
    log = afc.cwd / "calls.log"
    afc.write_manifest(manifest(jobs(12, latency_s=0.5)))
    env = {"AFC_LOCAL_CALL_LOG": str(log)}
    proc = afc.popen("submit", "manifest.yaml", "--concurrency", "4", env=env)
    wait_for(afc, STARTED, 2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 130
    err = proc.stderr.read()
    assert "stopping: no new provider calls" in err and "Continue with 'afc resume'" in err
    assert "no call abandoned" in err
    # every call that was in flight finished, was stored and recorded: nothing unknown. An
    # attempt row committed as the stop came is never sent: a known 0 (the unit test above)
    kinds = set(afc.rows("SELECT status, error_class, cost_micros, cost_source FROM attempts"))
    assert kinds <= {SUCCEEDED, ("failed", INTERRUPTED, 0, "unsent")}
    assert SUCCEEDED in kinds
    done = statuses(afc)
    assert done.get("succeeded", 0) >= 2 and set(done) <= {"succeeded", "queued"}
    assert afc.rows("SELECT COUNT(*) FROM jobs WHERE lease_owner IS NOT NULL") == [(0,)]
    rendered = len(calls(log))
    assert rendered == done["succeeded"]
    resumed = afc("resume", "--concurrency", "4", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert statuses(afc) == {"succeeded": 12}
    assert len(calls(log)) == 12, "no job rendered twice"


@pytest.mark.parametrize("how", ["sigterm-grace-0", "sigkill"])
def test_an_interruption_never_spends_the_only_attempt(afc, how):
    """attempts: 1 and the run ends mid-call: the job is not failed; resume renders it."""
    data = manifest(jobs(1))
    data["defaults"]["chain"][0]["attempts"] = 1
    afc.write_manifest(data)
    held = {"AFC_LOCAL_RELEASE": str(afc.cwd / "never")}  # the call never returns
    if how == "sigkill":
        proc = afc.popen("submit", "manifest.yaml", env=held)
        wait_for(afc, STARTED, 1)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    else:
        proc = afc.popen("submit", "manifest.yaml", "--grace", "0", env=held)
        wait_for(afc, STARTED, 1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 130
        assert "the grace period ran out" in proc.stderr.read()
        assert afc.rows("SELECT status FROM jobs") == [("queued",)]
    resumed = afc.json("resume")
    assert resumed["exit_code"] == 0, resumed
    assert resumed["jobs"][0]["status"] == "succeeded"
    attempts = afc.rows("SELECT number, status, error_class FROM attempts ORDER BY number")
    assert attempts == [(1, "unknown", INTERRUPTED), (2, "succeeded", None)]
    story = afc.json("show", "shot-001")
    assert "may have charged" in story["attempts"][0]["error"]
    status = afc.json("status")["jobs"][0]
    assert status["unpriced_attempts"] == 1  # possibly paid, kept
    # ``attempts`` counts the provider's answers: the interrupted one is not one (an outside
    # audit saw 2 here, the interrupted attempt counted), everywhere a job's attempts show
    assert status["attempts"] == 1 and resumed["jobs"][0]["attempts"] == 1
    table = afc("status", "--all").stdout.splitlines()  # piped: tab-separated
    assert table[1].split("\t")[:4] == ["shot-001", "succeeded", "done", "1"], table


def test_a_second_signal_abandons_the_calls_in_flight_at_once(afc):
    afc.write_manifest(manifest(jobs(2)))
    # the calls never return on their own: only the second signal can end the run
    proc = afc.popen("submit", "manifest.yaml", env={"AFC_LOCAL_RELEASE": str(afc.cwd / "never")})
    wait_for(afc, STARTED, 2)
    proc.send_signal(signal.SIGINT)
    wait_line(proc, "stopping")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=20) == 130
    err = proc.stderr.read()
    assert "a second signal: abandoning 2 job(s)" in err
    assert "2 call(s) in flight abandoned" in err
    # abandoned before the calls could end: recorded unknown (possibly paid), not lost
    assert afc.rows("SELECT status, error_class, COUNT(*) FROM attempts GROUP BY 1, 2") == [
        ("unknown", INTERRUPTED, 2)
    ]
    assert afc.rows("SELECT COUNT(*) FROM jobs WHERE lease_owner IS NOT NULL") == [(0,)]
    assert afc("resume").returncode == 0
    assert statuses(afc) == {"succeeded": 2}


def test_sigterm_while_openai_renders_keeps_every_paid_image(afc):
    """12 calls in flight to a fake OpenAI server (billing each generation it completes):
    all 12 are recorded succeeded and stored before exit 130, and resume pays for none again."""
    fake = FakeProviders().start()
    try:
        data = manifest(
            [{"key": f"s{i:02d}", "prompt": f"slow-3s shot {i}"} for i in range(12)],
            rates=[{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}],
        )
        data["defaults"]["chain"] = [{"provider": "openai", "model": "gpt-image-1"}]
        afc.write_manifest(data)
        env = fake.env()
        proc = afc.popen("submit", "manifest.yaml", "--concurrency", "12", env=env)
        wait_for(afc, STARTED, 12)
        # each row is committed before its request is sent: a SIGTERM between the two sends
        # nothing (a clean clone's suite saw 11 billed), so wait for all 12 at the server
        deadline = time.time() + 30
        while fake.counts["openai"] < 12 and time.time() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 130
        assert fake.counts["openai_billed"] == 12
        assert afc.rows("SELECT status, COUNT(*) FROM attempts GROUP BY status") == [
            ("succeeded", 12)
        ]
        assert statuses(afc) == {"succeeded": 12}
        stored = sorted(p.name for p in (afc.outputs() / "b1").glob("*.png"))
        assert stored == [f"s{i:02d}.png" for i in range(12)]
        resumed = afc("resume", env=env)
        assert resumed.returncode == 0, resumed.stderr
        again = afc("submit", "manifest.yaml", env=env)
        assert again.returncode == 0, again.stderr
        assert fake.counts["openai"] == 12 and fake.counts["openai_billed"] == 12
    finally:
        fake.stop()


def test_a_refused_connection_is_a_known_0_not_possibly_paid(afc):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    data = manifest(jobs(1))
    data["defaults"]["chain"] = [
        {"provider": "openai", "model": "gpt-image-1", "attempts": 2, "backoff": {"base": 0.01}}
    ]
    afc.write_manifest(data)
    env = {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1"}
    result = afc.json("submit", "manifest.yaml", env=env, expect=1)
    assert result["jobs"][0]["error"]["class"] == "unavailable"
    assert result["jobs"][0]["cost"] == "0.000000"
    assert afc.rows("SELECT status, error_class, cost_micros, cost_source FROM attempts") == [
        ("failed", "unavailable", 0, "unsent"),
        ("failed", "unavailable", 0, "unsent"),
    ]
    total = afc.json("costs", "report")["total"]
    assert total["unpriced_attempts"] == 0 and total["unknown_attempts"] == 0
    report = afc("costs", "report")
    assert "real spend is higher" not in report.stdout + report.stderr


# --- SIGKILL loops -----------------------------------------------------------------------------


def test_a_sigkill_loop_then_resume_finishes_every_job_paying_at_most_the_calls_in_flight(afc):
    log = afc.cwd / "calls.log"
    concurrency = 2
    data = manifest(jobs(50, latency_s=0.3))
    afc.write_manifest(data)
    env = {"AFC_LOCAL_CALL_LOG": str(log)}
    rng = random.Random(20261130)
    kills = 0
    args = ["submit", "manifest.yaml"]
    for i in range(14):
        before = (
            afc.rows("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'")[0][0]
            if (afc.cwd / "afc.db").exists()
            else 0
        )
        proc = afc.popen(*args, "--concurrency", str(concurrency), env=env)
        args = ["resume"]
        if i % 3 == 2:
            time.sleep(rng.uniform(0.1, 1.2))  # a kill at any instant, start-up included
        else:
            # a kill once the run renders, anywhere in its next half second
            try:
                wait_for(
                    afc,
                    "SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'",
                    before + concurrency,
                    timeout=20,
                )
            except AssertionError:
                pass
            time.sleep(rng.uniform(0.0, 0.5))
        if proc.poll() is not None:
            break  # the batch finished before this kill
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        kills += 1
    assert kills >= 10
    final = afc.json("resume", "--concurrency", str(concurrency), env=env)
    assert final["exit_code"] == 0, final
    assert statuses(afc) == {"succeeded": 50}
    assert afc.rows("SELECT DISTINCT status FROM attempts WHERE status != 'succeeded'") in (
        [],
        [("unknown",)],
    )
    assert afc.rows("SELECT COUNT(*) FROM attempts WHERE status = 'succeeded'") == [(50,)]
    renders = len(calls(log))
    assert renders <= 50 + kills * concurrency, (renders, kills)


def test_runs_that_keep_dying_mid_call_dead_letter_the_job_at_the_bound(afc):
    afc.write_manifest(manifest(jobs(1)))
    env = {"AFC_CRASH_POINT": "after_attempt_row", "AFC_MAX_INTERRUPTS": "2"}
    assert afc("submit", "manifest.yaml", env=env).returncode == -signal.SIGKILL
    assert afc("resume", env=env).returncode == -signal.SIGKILL
    stopped = afc.json("resume", env=env, expect=1)
    assert stopped["jobs"][0]["status"] == "dead"
    assert stopped["jobs"][0]["error"]["code"] == "CRASH_LOOP"
    assert "AFC_MAX_INTERRUPTS=2" in stopped["jobs"][0]["error"]["message"]
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(2,)], "no third paid call"
    assert afc.json("queue", "stats")["dlq"] == 1
    assert afc("resume", env={"AFC_MAX_INTERRUPTS": "zero"}).returncode == 2


def test_the_crash_loop_bound_of_one_is_said_in_words_that_agree(afc):
    """'ended during its provider call 1 times' (audit 44d): once."""
    afc.write_manifest(manifest(jobs(1)))
    env = {"AFC_CRASH_POINT": "after_attempt_row", "AFC_MAX_INTERRUPTS": "1"}
    assert afc("submit", "manifest.yaml", env=env).returncode == -signal.SIGKILL
    stopped = afc.json("resume", env=env, expect=1)
    message = stopped["jobs"][0]["error"]["message"]
    assert "ended during its provider call 1 time (AFC_MAX_INTERRUPTS=1)" in message, message


# --- afc retry, and failed jobs stay visible ----------------------------------------------------


def test_a_failed_job_stays_visible_until_retried_then_renders(afc):
    log = afc.cwd / "calls.log"
    data = manifest(
        [
            {"key": "bad", "prompt": "p", "params": {"fail": ["auth"]}},
            {"key": "ok", "prompt": "q"},
        ]
    )
    afc.write_manifest(data)
    env = {"AFC_LOCAL_CALL_LOG": str(log)}
    assert afc("submit", "manifest.yaml", env=env).returncode == 1
    # a later resume does not report success while the failed job waits for a person
    again = afc("resume", env=env)
    assert again.returncode == 1
    assert "b1/bad (failed, CHAIN_FAILED)" in again.stderr and "afc retry" in again.stderr
    assert afc.json("queue", "stats")["failed"] == 1
    assert afc("queue", "stats", "--fail-if", "failed>0").returncode == 1
    retried = afc("retry", "bad", "--by", "dana")
    assert retried.returncode == 0, retried.stderr
    assert "queued again (was failed)" in retried.stderr
    assert afc.json("resume", env=env)["exit_code"] == 0
    story = afc.json("show", "bad")
    assert [a["status"] for a in story["attempts"]] == ["failed", "succeeded"]
    event = next(e for e in story["events"] if e["kind"] == "retried")
    assert event["detail"]["by"] == "dana" and event["detail"]["previous_status"] == "failed"
    assert afc("retry", "bad").returncode == 2  # now succeeded: refused
    assert len(calls(log)) == 3  # bad twice (the failure and the retry), ok once


def test_retry_of_a_cancelled_job_and_by_filter(afc):
    afc.write_manifest(manifest(jobs(3)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    assert afc("cancel", "--batch", "b1", "--yes").returncode == 0
    # a filter that selects more than one job is listed and needs --yes without a terminal
    refused = afc("retry", "--batch", "b1", "--cancelled")
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert statuses(afc) == {"cancelled": 3}
    one = afc.json("retry", "shot-001")
    assert one["retried"] == [
        {"key": "shot-001", "batch": "b1", "was": "cancelled", "status": "queued"}
    ]
    rest = afc.json("retry", "--batch", "b1", "--cancelled", "--yes")
    assert [r["key"] for r in rest["retried"]] == ["shot-002", "shot-003"]
    assert afc("resume").returncode == 0
    assert statuses(afc) == {"succeeded": 3}


def test_a_succeeded_job_is_never_retried(afc):
    afc.write_manifest(
        manifest(
            [
                {"key": "shot-001", "prompt": "p", "params": {"fail": ["auth"]}},
                {"key": "shot-002", "prompt": "q"},
            ]
        )
    )
    afc("submit", "manifest.yaml")
    before = afc.rows("SELECT key, status, updated_at FROM jobs ORDER BY key")
    refused = afc("retry", "shot-001", "shot-002")
    assert refused.returncode == 2
    assert "shot-002: it succeeded" in refused.stderr and "nothing was changed" in refused.stderr
    assert afc.rows("SELECT key, status, updated_at FROM jobs ORDER BY key") == before
    assert afc("retry", "nope").returncode == 2
    assert afc("retry").returncode == 2


def test_retry_racing_a_running_worker_never_runs_the_job_twice(afc):
    log = afc.cwd / "calls.log"
    afc.write_manifest(manifest(jobs(1)))
    release = afc.cwd / "release"  # the render returns when this file exists
    env = {"AFC_LOCAL_CALL_LOG": str(log), "AFC_LOCAL_RELEASE": str(release)}
    worker = afc.popen("submit", "manifest.yaml", env=env)
    try:
        wait_for(afc, STARTED, 1)
        running = afc("retry", "shot-001")
        assert running.returncode == 2 and "it is running" in running.stderr
        assert afc("cancel", "shot-001").returncode == 0
        # cancelled, but its worker's call is still in flight: a retry now could pay twice
        busy = afc("retry", "shot-001")
        assert busy.returncode == 2 and "still in flight" in busy.stderr
    finally:
        release.touch()
        assert worker.wait(timeout=30) == 1
    assert afc("retry", "shot-001").returncode == 0
    assert afc("resume", env=env).returncode == 0
    assert statuses(afc) == {"succeeded": 1}
    # the render paid before the cancel was kept in the spool and is the one stored
    assert len(calls(log)) == 1
    assert afc.rows("SELECT status FROM attempts") == [("succeeded",)]


def test_two_retries_at_once_queue_the_job_once(afc):
    afc.write_manifest(manifest(jobs(1, fail=["auth"])))
    afc("submit", "manifest.yaml")
    procs = [afc.popen("retry", "shot-001") for _ in range(3)]
    codes = sorted(p.wait(timeout=30) for p in procs)
    assert codes[0] == 0
    assert afc.rows("SELECT retries, status FROM jobs") == [(1, "queued")]
    assert afc.rows("SELECT COUNT(*) FROM events WHERE kind = 'retried'") == [(1,)]


def test_a_call_on_another_host_blocks_a_retry_only_until_it_is_stale():
    """A process on another host can't be proved dead from here: its started call blocks a
    retry for STALE_CALL_S (longer than any call's timeout), then no longer."""
    from afc_cli.ops import STALE_CALL_S, _in_flight

    attempt = {"status": "started", "owner": "elsewhere.example:123:456", "started_at": time.time()}
    assert _in_flight(attempt)
    attempt["started_at"] -= STALE_CALL_S + 1
    assert not _in_flight(attempt)
    assert not _in_flight({**attempt, "started_at": time.time(), "status": "succeeded"})


def test_a_live_call_of_this_host_blocks_a_retry_however_old_when_afc_host_id_names_it(
    monkeypatch,
):
    """AFC_HOST_ID names this host in owner ids: a started call of a live process here blocks a
    retry for as long as that process lives, not only for STALE_CALL_S (it compared the owner's
    host with the machine's host name, so with AFC_HOST_ID set a long call counted as stale)."""
    from afc_cli import owner
    from afc_cli.ops import STALE_CALL_S, _in_flight

    monkeypatch.setenv("AFC_HOST_ID", "render-7")
    owner.current_owner.cache_clear()
    try:
        mine = owner.current_owner()
        assert mine.startswith("render-7:")
        old = time.time() - STALE_CALL_S - 60
        assert _in_flight({"status": "started", "owner": mine, "started_at": old})
    finally:
        owner.current_owner.cache_clear()


def test_a_run_abandons_once_though_it_outlives_the_grace_after_a_second_signal():
    """The second signal abandons the calls in flight; the grace's timer, still set, abandoned
    them again when the run outlived it (keeping and storing its renders), saying
    'abandoning 0 job(s)' a second time (outside audit 54e). One abandon, one line."""
    import asyncio
    from types import SimpleNamespace

    from afc_cli.run import Interruption, Reporter

    said = []

    class Said(Reporter):
        def stopping(self, *args, **kw):
            pass

        def abandoning(self, why, in_flight, storing=0):
            said.append((why, in_flight))

    async def main():
        # what the drain and the abandon read of a run's context
        ctx = SimpleNamespace(
            stopping=asyncio.Event(), storing=set(), protected=set(), polling=set(), fetching=set()
        )
        busy = asyncio.ensure_future(asyncio.Event().wait())
        stop = Interruption(ctx, {"job": busy}, 0, Said())  # the grace: the loop's next turn
        stop.signals = 1
        stop.drain()
        stop.signals = 2
        stop.abandon("a second signal")
        await asyncio.gather(busy, return_exceptions=True)
        for _ in range(3):  # past the grace: its timer would abandon again
            await asyncio.sleep(0)

    asyncio.run(main())
    assert said == [("a second signal", 1)]
