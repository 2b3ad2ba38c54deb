"""The operating system around a run: signals other than SIGTERM and SIGKILL, a terminal or a
pipe that goes away mid-run, the spool's files changed behind afc's back.

Through the real ``afc`` command in a child process (its own session, so a signal can reach
its whole process group, the file helper included, as a terminal's hangup does).
"""

from __future__ import annotations

import os
import signal
import subprocess

import pytest
from conftest import jobs, manifest, wait_for

STARTED = "SELECT COUNT(*) FROM attempts WHERE status = 'started'"


def session(afc, *args: str, env: dict[str, str] | None = None, **io) -> subprocess.Popen:
    """``afc`` in a session of its own: ``os.killpg`` reaches it and its file helper."""
    io = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE, **io}
    return subprocess.Popen(
        afc.command(*args),
        cwd=afc.cwd,
        env={**afc.env, **(env or {})},
        start_new_session=True,
        text=True,
        **io,
    )


def wait_line(proc: subprocess.Popen, text: str) -> str:
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if text in line:
            return "".join(seen)
    raise AssertionError(f"{text!r} never came (exit {proc.wait()}); stderr: {''.join(seen)}")


# --- SIGHUP: a terminal that hangs up drains the run as SIGTERM does ---------------------------


@pytest.mark.parametrize("command", ["submit", "worker"])
def test_a_hangup_drains_the_calls_in_flight_and_records_them(afc, command):
    """An ``afc submit`` started over ssh whose connection drops: the shell sends SIGHUP to
    the job's process group. Python's default for it is death on the spot (exit 129), which
    left every call in flight ``started`` (possibly paid, rendered and paid again by the next
    run); it is an interruption like SIGTERM: no new call, the calls in flight finish and are
    stored and recorded, exit 130 (a worker: 0, stopping is its normal end)."""
    log, release = afc.cwd / "calls.log", afc.cwd / "release"
    afc.write_manifest(manifest(jobs(6)))
    env = {"AFC_LOCAL_CALL_LOG": str(log), "AFC_LOCAL_RELEASE": str(release)}
    if command == "submit":
        proc = session(afc, "submit", "manifest.yaml", "--concurrency", "3", env=env)
    else:
        assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
        args = ("worker", "--until-idle", "--concurrency", "3", "--poll", "0.05")
        proc = session(afc, *args, env=env)
    wait_for(afc, STARTED, 3)  # three calls held at the provider
    os.killpg(proc.pid, signal.SIGHUP)
    wait_line(proc, "stopping: no new provider calls")
    release.touch()  # the provider answers the calls in flight
    assert proc.wait(timeout=30) == (130 if command == "submit" else 0), proc.stderr.read()
    assert afc.rows("SELECT status, cost_micros, COUNT(*) FROM attempts GROUP BY 1, 2") == [
        ("succeeded", 50_000, 3)
    ]
    assert afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY 1") == [
        ("queued", 3),
        ("succeeded", 3),
    ]
    assert afc.rows("SELECT COUNT(*) FROM jobs WHERE lease_owner IS NOT NULL") == [(0,)]
    resumed = afc("resume", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert len(log.read_text().splitlines()) == 6, "no job rendered twice"
