"""A worker that runs for weeks (outside audit 38b): what a long outage leaves behind it.

A service worker whose storage check fails with a retryable error (the bucket's endpoint gone
for a while) gives the round's jobs back and tries again at the next poll. It said the same
line at every try: with the default --poll of 2 s, an hour's S3 outage wrote over a thousand
identical lines into the journal (measured against moto behind a proxy that refused
connections: a line a round, every second or so at --poll 0.1), and never said when it ended.
It is said once, again every ``STORAGE_DOWN_SAY_S`` while the failure lasts, and its end once."""

from __future__ import annotations

import os
import signal

from conftest import jobs, manifest

from afc_cli import run as run_mod
from afc_cli import worker as worker_mod
from afc_cli.errors import StorageError
from afc_cli.run import RunStats
from afc_cli.worker import work

FAILURES = 25


class Notices:
    def __init__(self) -> None:
        self.said: list[str] = []

    def notice(self, message: str) -> None:
        self.said.append(message)

    def event(self, *args, **kwargs) -> None:
        pass


def _outage_then_back(afc, monkeypatch) -> list[str]:
    """A worker whose storage check fails ``FAILURES`` rounds running (a retryable error),
    then passes; stopped (SIGTERM) once the round after the outage ran. What it said."""
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    monkeypatch.chdir(afc.cwd)
    calls = []

    def run_jobs(ledger, job_ids, **kwargs):
        calls.append(job_ids)
        if len(calls) <= FAILURES:
            raise StorageError(
                "cannot use bucket renders: connection problem: Could not connect to the "
                'endpoint URL: "http://127.0.0.1:9/renders"',
                retryable=True,
            )
        os.kill(os.getpid(), signal.SIGTERM)  # the worker's own handler: a service's stop
        return RunStats()

    monkeypatch.setattr(run_mod, "run_jobs", run_jobs)
    notices = Notices()
    result = work(
        ledger_path=str(afc.cwd / "afc.db"),
        concurrency=1,
        poll_s=0.01,
        grace_s=0,
        reporter=notices,
    )
    assert result.exit_code == 0
    assert len(calls) == FAILURES + 1
    # every failed round gave its jobs back: the round after the outage claimed them again
    assert sorted(calls[-1]) == sorted(calls[0])
    # and only that round is counted: the rounds given back unrun were counted as claims
    assert (result.rounds, result.claimed) == (1, 2), result
    return notices.said


def test_a_storage_outage_is_said_once_and_its_end_once(afc, monkeypatch):
    said = _outage_then_back(afc, monkeypatch)
    failing = [line for line in said if "cannot use bucket renders" in line]
    assert len(failing) == 1, said  # was one a round: 25 of the same line
    assert "trying again every 0.01 s" in failing[0]
    back = [line for line in said if "storage check passes again" in line]
    assert len(back) == 1, said


def test_a_storage_outage_that_lasts_is_said_again_now_and_then(afc, monkeypatch):
    """Not only once: a journal read an hour into the outage shows that it still fails."""
    monkeypatch.setattr(worker_mod, "STORAGE_DOWN_SAY_S", 0.0)
    said = _outage_then_back(afc, monkeypatch)
    failing = [line for line in said if "cannot use bucket renders" in line]
    assert len(failing) == FAILURES, said
    assert "(failing for" in failing[-1]
