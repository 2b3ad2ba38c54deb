"""A stopping run fetches a polled request's ready result rather than leave it to the next run.

A Replicate prediction or a fal request that a run polled to its end (rendered, billed) was,
at a SIGTERM or the first Ctrl-C, left to the next run like one still rendering, even while
its output was being downloaded: the next run polled it by its id, and fal deletes a result
of 10 KB or more six minutes after it completed, so a cron'd run coming back hours later paid
for a new render of an output that was ready when the run stopped. A stopping run now waits
for such a fetch a moment (``run.FETCH_WAIT_S``, within the grace period), stores the output,
and leaves the request to the next run only when its fetch lasts longer (outside audit 32b's
report, which left it as a judgement call)."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from test_audit26f_killpoints import _attempts, _chain, _write, fakes  # noqa: F401

FILE = r"^/files/"  # the output's download, after the request completed


def _stopped_while_fetching(afc, fakes, provider: str, held_s: float):  # noqa: F811
    """A submit SIGTERMed while its request's output downloads, that download answered after
    ``held_s``; returns the stopped run's exit code and seconds from the signal to its exit."""
    _write(afc, _chain(provider, attempts=1))
    hold = fakes.holds.add("GET", FILE, "after")
    proc = afc.popen("submit", "manifest.yaml")
    assert hold.arrived.wait(60), "the output's download never came"
    proc.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    threading.Timer(held_s, hold.release.set).start()
    code = proc.wait(60)
    return code, time.monotonic() - signalled


@pytest.mark.parametrize("provider", ["fal", "replicate"])
def test_a_ready_result_is_fetched_and_stored_by_the_stopping_run(afc, fakes, provider):  # noqa: F811
    code, _ = _stopped_while_fetching(afc, fakes, provider, held_s=1.0)
    assert code == 130
    # the stopped run itself stored it: nothing is left for a later run to find deleted
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert (afc.outputs() / "b1" / "j.png").exists()
    assert fakes.charged() == 1
    again = afc("resume")
    assert again.returncode == 0, again.stderr
    assert fakes.charged() == 1


@pytest.mark.parametrize("provider", ["fal", "replicate"])
def test_a_fetch_that_lasts_is_left_to_the_next_run_as_before(afc, fakes, provider):  # noqa: F811
    from afc_cli.run import FETCH_WAIT_S

    code, took = _stopped_while_fetching(afc, fakes, provider, held_s=FETCH_WAIT_S + 20)
    assert code == 130
    assert took < FETCH_WAIT_S + 15, took  # left at FETCH_WAIT_S, not held to the download
    assert afc.rows("SELECT status FROM jobs") != [("succeeded",)]
    [(_, status, _, request_id)] = _attempts(afc, str(afc.cwd / "afc.db"))
    assert status == "unknown" and request_id  # polled by its id by the next run
    fakes.holds.release_all()
    again = afc("resume")
    assert again.returncode == 0, again.stderr
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert fakes.charged() == 1  # fetched by its id, not rendered again
