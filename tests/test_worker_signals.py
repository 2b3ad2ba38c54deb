"""A SIGTERM is never lost, whenever it comes: an ``afc worker`` stopped at the moment its run
loop ended kept polling, deaf to it, until CI's test killed it (afc_cli/run.py
``Interruption.installed``, afc_cli/worker.py ``Stop``)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from test_worker_refill import admitted  # noqa: F401  (a fixture: ten admitted jobs)

from afc_cli import run as run_mod
from afc_cli.ledger import Ledger
from afc_cli.run import Interruption, Reporter
from afc_cli.worker import Stop, work


@pytest.fixture
def restored():
    """The test's own SIGTERM handler, put back afterwards: a signal the code under test
    failed to take is counted here instead of killing pytest."""
    seen: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    yield seen
    signal.signal(signal.SIGTERM, previous)


def test_a_signal_after_the_loops_last_turn_still_interrupts_the_run(restored):
    async def main() -> Interruption:
        interruption = Interruption(None, {}, 0, Reporter())  # no task: nothing to drain
        with interruption.installed(asyncio.get_running_loop()):
            os.kill(os.getpid(), signal.SIGTERM)
            # no await: the loop takes no other turn before the handlers are put back
        await asyncio.sleep(0)  # the loop's next turns run what the signal queued
        await asyncio.sleep(0)
        return interruption

    interruption = asyncio.run(main())
    assert interruption.interrupted, "the run says it was stopped: a worker stops too"
    assert interruption.signals == 0, "nothing is drained once the run's block has ended"
    assert restored == [], "the run's handler took the signal"
    os.kill(os.getpid(), signal.SIGTERM)
    assert restored == [signal.SIGTERM], "the previous handler is back after the run"


def test_a_stop_set_by_a_signal_handler_wakes_its_wait():
    stop = Stop()
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: stop.set())
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        assert stop.wait(60) is True  # woken by the handler, not by the timeout
        assert stop.is_set() and stop.wait(60) is True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        stop.close()
    unset = Stop()
    try:
        assert unset.wait(0.01) is False
    finally:
        unset.close()


def test_a_sigterm_before_the_run_loop_took_the_signals_drains_at_once(
    admitted,  # noqa: F811
    monkeypatch,
    tmp_path,
):
    """The signal comes after the worker claimed jobs, before the loop installed its handlers
    (while it opens the storages): no claimed job is sent, and every one is released."""
    url, m = admitted
    real = run_mod.run_jobs

    def signalled_first(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # the worker's own handler takes it
        return real(*args, **kwargs)

    monkeypatch.setattr(run_mod, "run_jobs", signalled_first)
    monkeypatch.setenv("AFC_SPOOL_DIR", str(tmp_path / "spool"))  # a PostgreSQL ledger's
    result = work(ledger_path=url, concurrency=1, claim=3, grace_s=5)
    assert result.stopped_by_signal and result.exit_code == 0
    assert (result.claimed, result.finished) == (3, 0)
    ledger = Ledger(url)
    try:
        for job in m.jobs:
            row = ledger.job(job.job_id)
            assert (row["status"], row["lease_owner"]) == ("queued", None)
            assert ledger.attempts(job.job_id) == []
    finally:
        ledger.close()
