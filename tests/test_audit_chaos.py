"""Defects found by the chaos reconciliation (bench/chaos.py): afc killed at random moments
with SIGKILL, SIGTERM, SIGINT and double signals, then the fake providers' own request log
reconciled against the ledger and the storage."""

from __future__ import annotations

import signal
import subprocess
import time

from conftest import jobs, manifest


def test_a_signal_as_the_command_exits_leaves_a_documented_exit_code(afc):
    """The summary printed, the exit code decided: a SIGTERM then (a cron job's timeout, a
    container stopping) killed the process with -15 (143 in a shell) in Python's teardown,
    where SIGINT and SIGTERM are back to their defaults, instead of the run's own code."""
    afc.write_manifest(manifest(jobs(2)))
    codes = []
    for _ in range(4):
        proc = subprocess.Popen(
            afc.command("submit", "manifest.yaml"),
            cwd=afc.cwd,
            env=afc.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for line in proc.stderr:
            if "run here" in line:  # the summary: the run is over
                break
        while proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.01)
        proc.stderr.read()
        codes.append(proc.wait())
    assert set(codes) <= {0, 130}, codes
