"""Audit: clocks and time. What afc does when a host's wall clock jumps (an NTP step, a laptop's
suspend: Linux's ``time.monotonic()`` does not advance while the system sleeps, its wall clock
does), simulated in a child ``afc`` by a ``sitecustomize`` that shifts its clocks by amounts
read from files the test changes."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from conftest import frozen_at, jobs, manifest, wait_for

# Shifts ``time.time`` (the wall clock afc's ledger and pipeline read) by the seconds in
# ``$AFC_TEST_WALL_SHIFT``'s file, and ``time.monotonic`` by those in ``$AFC_TEST_MONO_SHIFT``'s;
# each file is read again when it changes.
SITECUSTOMIZE = """
import os
import time

_real_time, _real_mono = time.time, time.monotonic


def _shift(var, cache={}):
    path = os.environ.get(var)
    if not path:
        return 0.0
    try:
        stamp = os.stat(path).st_mtime_ns
    except OSError:
        return 0.0
    if cache.get(var, (None,))[0] != stamp:
        with open(path) as fh:
            cache[var] = (stamp, float(fh.read() or 0))
    return cache[var][1]


time.time = lambda: _real_time() + _shift("AFC_TEST_WALL_SHIFT")
time.monotonic = lambda: _real_mono() + _shift("AFC_TEST_MONO_SHIFT")
"""


def shifted(afc, **files: Path) -> dict[str, str]:
    """The environment of an ``afc`` whose clocks are shifted by what ``files`` hold
    (``wall=``, ``mono=``)."""
    site = afc.cwd / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {"PYTHONPATH": str(site)}
    if "wall" in files:
        env["AFC_TEST_WALL_SHIFT"] = str(files["wall"])
    if "mono" in files:
        env["AFC_TEST_MONO_SHIFT"] = str(files["mono"])
    return env


def test_a_wall_clock_jump_does_not_let_a_second_run_on_the_host_take_a_live_runs_job(afc):
    """A live run's job was taken over by another afc process on the same host once the wall
    clock had moved past its lease (an NTP step forward, or a laptop that slept longer than
    the lease: the run's renewals wait on the monotonic clock, which stood still): the second
    run marked the first one's call in flight unknown and paid for the job again. On one
    host a lease is measured by the monotonic clock, which neither moves."""
    afc.write_manifest(manifest(jobs(1)))
    calls, release = afc.cwd / "calls.log", afc.cwd / "release"
    env = {"AFC_LOCAL_CALL_LOG": str(calls)}
    first = afc.popen("submit", "manifest.yaml", env={**env, "AFC_LOCAL_RELEASE": str(release)})
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 1)
        jump = afc.cwd / "wall-shift"
        jump.write_text("600")  # the wall clock, 10 minutes on: past the 300 s lease
        second = afc("resume", env={**env, **shifted(afc, wall=jump)})
        assert afc.rows("SELECT COUNT(*) FROM events WHERE kind = 'takeover'") == [(0,)], (
            second.stderr
        )
        assert len(calls.read_text().splitlines()) == 1, "the job was paid for twice"
    finally:
        release.touch()
    assert first.wait(timeout=60) == 0, first.stderr.read()
    assert afc.rows("SELECT status, attempts FROM jobs") == [("succeeded", 1)]
    assert afc.rows("SELECT status FROM attempts") == [("succeeded",)]


def test_a_live_owner_here_holds_its_lease_by_the_monotonic_clock():
    """``lease_held`` for a live process of this host (here, the test's parent): its monotonic
    expiry decides, whatever the wall clock says; a stalled one (that expiry past) loses it."""
    import os
    import time

    from afc_cli.owner import _start_ticks, host_id, lease_held

    parent = f"{host_id()}:{os.getppid()}:{_start_ticks(os.getppid())}"
    now, mono = time.time(), time.monotonic()
    assert lease_held(parent, now - 600, now, mono + 100), "a wall clock moved on"
    assert not lease_held(parent, now + 600, now, mono - 1), "stalled past its lease"
    assert not lease_held(parent, now - 1, now), "no monotonic expiry: the wall clock decides"
    other = f"elsewhere-{host_id()}:{os.getppid()}:1"
    assert not lease_held(other, now - 1, now, mono + 100), "another host's: its expiry decides"


def test_a_host_that_slept_before_its_request_does_not_send_it_once_taken_over(afc):
    """The look at a job after a slow attempt-row commit (``pipeline.LEASE_RECHECK_S``) timed
    the commit on ``time.monotonic()``, which stands still while a host sleeps: a worker whose
    laptop was suspended between its attempt row and its paid request, its job taken over
    and rendered by another host meanwhile, found the commit quick when it woke and sent the
    request, paying for the job a second time (as test_concurrency's frozen process did
    before the look). The sleep is simulated: host-a's monotonic clock is set back by as long
    as it was stopped."""
    afc.write_manifest(manifest(jobs(1)))
    calls, mono = afc.cwd / "calls.log", afc.cwd / "mono-shift"
    env = {"AFC_LEASE_S": "3", "AFC_LOCAL_CALL_LOG": str(calls)}
    frozen = afc.popen(
        "submit",
        "manifest.yaml",
        env={
            **env,
            **shifted(afc, mono=mono),
            "AFC_HOST_ID": "host-a",
            "AFC_STALL_POINT": "after_attempt_row",
        },
    )
    try:
        frozen_at(frozen)
        asleep = time.monotonic()
        time.sleep(3.5)  # past its 3 s lease
        other = afc("resume", env={**env, "AFC_HOST_ID": "host-b"})
        assert other.returncode == 0, other.stderr
        # host-a's monotonic clock did not count the time it slept
        mono.write_text(str(-(time.monotonic() - asleep)))
    finally:
        frozen.send_signal(signal.SIGCONT)
    _, err = frozen.communicate(timeout=60)
    assert len(calls.read_text().splitlines()) == 1, f"host-b's call alone\n{err}"
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(2,)]


def test_a_wall_clock_set_back_does_not_hold_a_per_minute_limit_full_for_as_long(
    afc, tmp_path, monkeypatch
):
    """A SQLite ledger's clock is the host's. Set back an hour (an NTP step after a boot with
    the hardware clock in local time), the calls started just before were dated an hour
    ahead, and ``per_minute`` counted them in "the last minute" for that hour: every start
    was refused and told to wait an hour (the run slept up to 1.5 times that). A start dated
    ahead of the ledger's clock by more than a minute no longer counts, and no wait is longer
    than the minute."""
    from afc_cli.costs import RateCards
    from afc_cli.ledger import Ledger, ProviderBusy, core
    from afc_cli.manifest import load_manifest

    m = load_manifest(afc.write_manifest(manifest(jobs(3))))
    real = core._now
    ledger = Ledger(tmp_path / "afc.db")
    try:
        ledger.admit(m, "file:///tmp/x", RateCards())
        monkeypatch.setattr(core, "_now", lambda: real() + 3600)  # before the step
        first = ledger.claim(m.jobs[0].job_id, 60)
        assert ledger.start_attempt(first, 0, "local", "m1", None, durable=False, limit=(None, 1))
        monkeypatch.setattr(core, "_now", real)  # the wall clock, an hour back
        second = ledger.claim(m.jobs[1].job_id, 60)
        try:
            started = ledger.start_attempt(
                second, 0, "local", "m1", None, durable=False, limit=(None, 1)
            )
        except ProviderBusy as busy:
            raise AssertionError(f"refused: {busy.reason}, wait {busy.retry_after:.0f}s") from None
        assert started == 1
        third = ledger.claim(m.jobs[2].job_id, 60)
        with pytest.raises(ProviderBusy) as busy:  # the minute is full again, on the new clock
            ledger.start_attempt(third, 0, "local", "m1", None, durable=False, limit=(None, 1))
        assert 0 < busy.value.retry_after <= 60
    finally:
        ledger.close()


def test_a_retry_on_a_host_whose_clock_is_ahead_still_sees_another_hosts_call(afc, pg_url):
    """``afc retry`` refuses a job whose earlier run (on another host, which it cannot prove
    dead) has a call in flight, until STALE_CALL_S after its start. On PostgreSQL that start
    is stamped on the database server's clock, but the age was taken from this host's wall
    clock: run on a host 20 minutes ahead of the server, the retry took the call of a moment
    ago for a stale one and queued the job again, a second render paid while the first was
    still running."""
    from afc_cli.costs import RateCards
    from afc_cli.ledger import Ledger
    from afc_cli.manifest import load_manifest

    m = load_manifest(afc.write_manifest(manifest(jobs(1))))
    ledger = Ledger(pg_url)
    try:
        ledger.admit(m, "file:///tmp/x", RateCards())
        ledger.owner = "host-b:1:1"  # a worker on another host, mid-call
        job = ledger.claim(m.jobs[0].job_id, 300)
        assert ledger.start_attempt(job, 0, "local", "m1", None, durable=True) == 1
        assert ledger.cancel(ledger.job(job["id"]), "a person cancelled it")
    finally:
        ledger.close()
    ahead = afc.cwd / "wall-shift"
    ahead.write_text("1200")  # this host's clock, 20 minutes ahead of the server's
    refused = afc("retry", "shot-001", "--ledger", pg_url, env=shifted(afc, wall=ahead))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "still in flight" in refused.stderr


def test_queue_stats_ages_are_never_negative_after_the_clock_was_set_back(
    afc, tmp_path, monkeypatch
):
    """Jobs admitted before the host's clock was set back an hour were dated an hour ahead:
    ``afc queue stats`` gave ``oldest_age_seconds`` of about -3600, which no ``--fail-if
    'oldest_age_seconds>...'`` alert fires on. An age is at least 0."""
    from afc_cli.costs import RateCards
    from afc_cli.ledger import Ledger, core
    from afc_cli.manifest import load_manifest

    m = load_manifest(afc.write_manifest(manifest(jobs(1))))
    real = core._now
    ledger = Ledger(tmp_path / "afc.db")
    try:
        monkeypatch.setattr(core, "_now", lambda: real() + 3600)  # before the step
        ledger.admit(m, "file:///tmp/x", RateCards())
        monkeypatch.setattr(core, "_now", real)
        stats = ledger.queue_stats()
    finally:
        ledger.close()
    assert stats["queued"] == 1
    assert stats["oldest_age_seconds"] == 0


def test_costs_since_and_by_day_say_their_dates_are_utc(afc):
    """``--since 2026-11-29`` means midnight UTC and ``--by day`` groups UTC days, but neither
    the help nor the README said so: a studio in California read a day's spend eight hours
    off. An offset given with the date is honoured."""
    from afc_cli.costs_report import parse_since

    assert "UTC" in afc("costs", "report", "-h").stdout.split("--since", 1)[1].split("\n")[0]
    assert "day (UTC)" in afc("costs", "report", "-h").stdout
    assert "UTC" in afc("report", "-h").stdout.split("--since", 1)[1]
    assert parse_since("2026-11-29") == 1795910400.0
    assert parse_since("2026-11-29T00:00-08:00") == 1795910400.0 + 8 * 3600


def test_the_postgres_lease_clock_counts_a_suspend_between_its_samples(afc, pg_url, monkeypatch):
    """On PostgreSQL the lease clock is the server's, sampled every 10 s and advanced between
    samples by this host's monotonic clock, which stands still while the host sleeps. Inside
    a run's group transaction no sample is taken, so a worker woken from a suspend read the
    server's time as it was when it went to sleep: the leases its renewals and claims wrote
    were short by the whole suspend (expired as written, past the lease), for another host
    to take over while it worked on them, and pay for them again. The suspend is simulated:
    this host's monotonic clock falls 600 s behind its wall clock and the server's."""
    import asyncio
    import types

    from afc_cli import owner
    from afc_cli.costs import RateCards
    from afc_cli.ledger import Ledger, postgres
    from afc_cli.manifest import load_manifest

    m = load_manifest(afc.write_manifest(manifest(jobs(1))))
    ledger = Ledger(pg_url)
    try:
        ledger.admit(m, "file:///tmp/x", RateCards())
        job = ledger.claim(m.jobs[0].job_id, 60)
        ledger.lease_clock()  # a fresh sample
        real = time.monotonic
        slept = types.SimpleNamespace(**{n: getattr(time, n) for n in dir(time) if n[0] != "_"})
        slept.monotonic = lambda: real() - 600
        monkeypatch.setattr(postgres, "time", slept)
        monkeypatch.setattr(owner, "time", slept)  # owner.awake_clock, the lease clock's ticks

        async def run() -> float:
            with ledger.grouped(asyncio.get_running_loop()):
                ledger.note(job, "woke")  # a group transaction open, as in a run
                assert ledger.db.pipe is not None
                return ledger.lease_clock()

        now = asyncio.run(run())
        server = float(
            ledger.db.execute("SELECT EXTRACT(EPOCH FROM clock_timestamp())").fetchone()[0]
        )
    finally:
        ledger.close()
    assert abs(now - server) < 5, f"the lease clock is {server - now:.0f} s behind the server's"


def test_a_run_renews_its_leases_soon_after_its_host_wakes(monkeypatch):
    """A run renewed its leases every third of the lease on the event loop's clock, which
    stands still while the host is suspended. Renewed at t=100 (300 s lease: held until 400),
    suspended at 130 for 250 s, woken at 380 with its leases still held, it renewed at 450:
    from 400 other hosts could take its jobs over while it worked on them, and pay again.
    Driven without an event loop: ``asyncio.sleep`` advances a fake boot-time clock (and
    the suspend adds to it), ``time.clock_gettime`` reads it."""
    import asyncio

    from afc_cli import run

    start = 1000.0
    boot = [start]
    suspend = {"at": start + 130, "for": 250.0}
    renewals: list[float] = []

    class Enough(Exception):
        pass

    class Book:
        def renew_leases(self, lease_s: float) -> None:
            assert lease_s == 300
            renewals.append(boot[0])

    async def sleep(seconds: float) -> None:
        began = boot[0]
        boot[0] += seconds
        if suspend and began <= suspend["at"] < boot[0]:
            boot[0] += suspend.pop("for")
        if boot[0] > start + 1000:
            raise Enough

    monkeypatch.setattr(asyncio, "sleep", sleep)
    monkeypatch.setattr(time, "clock_gettime", lambda clock: boot[0])
    monkeypatch.setattr(time, "monotonic", lambda: boot[0])  # where there is no boot clock
    try:
        run._renew(Book(), 300.0).send(None)
    except Enough:
        pass
    assert abs(renewals[0] - (start + 100)) < 0.1, renewals
    gaps = [b - a for a, b in zip([start, *renewals], renewals, strict=False)]
    assert max(gaps) < 300, f"a renewal came {max(gaps):.0f} s after the last: {renewals}"


def test_a_copy_after_the_wall_clock_jumped_still_refuses_a_source_a_live_run_holds(afc):
    """``afc ledger copy`` refuses a source a live run holds, or the copy misses what that run
    is about to record (its paid attempts among them). It read "held" off the wall clock
    alone: with the clock stepped past the run's leases it copied beside the live run."""
    afc.write_manifest(manifest(jobs(1)))
    release = afc.cwd / "release"
    run = afc.popen("submit", "manifest.yaml", env={"AFC_LOCAL_RELEASE": str(release)})
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 1)
        jump = afc.cwd / "wall-shift"
        jump.write_text("600")
        refused = afc("ledger", "copy", "afc.db", "copy.db", env=shifted(afc, wall=jump))
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "held by a live run" in refused.stderr
    finally:
        release.touch()
        assert run.wait(timeout=60) == 0


def test_a_retry_after_date_is_measured_against_the_answers_own_date():
    """A 429 or 503 may say when to come back as an HTTP date. afc measured it against this
    host's clock: a minute fast, "in 30 s" read as a date already past, a wait of 0 s, and
    the retries went at once with no backoff, using up the model's attempts in a burst. The
    answer's ``Date`` header is the server's clock: the wait is measured against it."""
    import httpx

    from afc_cli.attempts import parse_retry_after
    from afc_cli.providers.http import retry_after_for

    # the server's clock in 2015; this host's (now) years later: far "ahead"
    headers = httpx.Headers(
        {"retry-after": "Wed, 21 Oct 2015 07:28:30 GMT", "date": "Wed, 21 Oct 2015 07:28:00 GMT"}
    )
    assert retry_after_for("rate_limited", headers) == 30
    assert retry_after_for("unavailable", headers) == 30
    # no readable Date: this host's clock, as before
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", date="garbage") == 0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now=1445412480.0) == 30
    assert parse_retry_after("12", date="Wed, 21 Oct 2015 07:28:00 GMT") == 12


def test_a_plan_after_a_wall_clock_jump_leaves_a_live_runs_job_to_it(afc):
    """'afc plan' judged a live run's lease by its wall-clock expiry alone, where a claim on
    the same host reads its monotonic one (``lease_mono``): after a wall-clock jump past the
    lease (an NTP step, a laptop that slept), a plan beside a resume rendering one of two jobs
    counted it as to render and priced it (2 to render, 0.10 USD, '--max-spend 0.05' did NOT
    fit), where the submit leaves it to that run and renders the other for 0.05."""
    slow = {"key": "slow", "prompt": "a slow shot", "params": {"latency_s": 120}}
    later = {"key": "later", "prompt": "a later shot", "params": {"latency_s": 120}}
    afc.write_manifest(manifest([slow, later]))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    running = afc.popen("resume", "--concurrency", "1")
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts", 1)
        jump = afc.cwd / "wall-shift"
        jump.write_text("600")  # the wall clock, 10 minutes on: past the 300 s lease
        plan = afc.json("plan", "manifest.yaml", "--max-spend", "0.05", env=shifted(afc, wall=jump))
    finally:
        running.kill()
        running.wait(timeout=30)
    assert (plan["to_render"], plan["elsewhere"]) == (1, 1), plan["jobs"]
    assert plan["estimated_spend"] == "0.050000"
    assert plan["fits_budget"] is True


def test_a_card_corrected_after_a_wall_clock_jump_still_names_the_live_run(afc):
    """A re-submit that corrects a batch's rate card names the live afc processes holding its
    jobs, which go on pricing by the card they began with (``Ledger._card_holders``). After
    a wall-clock jump past their lease (an NTP step, a laptop that slept) it judged their
    leases by the wall clock alone, where a claim judges them by ``lease_mono``: the run
    went on at 0.05 an image after a correction to 0.50, and the re-submit said nothing."""
    afc.write_manifest(manifest(jobs(1)))
    release = afc.cwd / "release"
    first = afc.popen("submit", "manifest.yaml", env={"AFC_LOCAL_RELEASE": str(release)})
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 1)
        jump = afc.cwd / "wall-shift"
        jump.write_text("600")  # the wall clock, 10 minutes on: past the 300 s lease
        afc.write_manifest(
            manifest(jobs(1), rates=[{"provider": "local", "model": "m1", "per_image": "0.50"}])
        )
        corrected = afc("submit", "manifest.yaml", "--no-run", env=shifted(afc, wall=jump))
        assert corrected.returncode == 0, corrected.stderr
        assert "rate cards changed while an afc process holds" in corrected.stderr, corrected.stderr
        assert f"pid {first.pid} on " in corrected.stderr
    finally:
        release.touch()
    assert first.wait(timeout=60) == 0, first.stderr.read()
