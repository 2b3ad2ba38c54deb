"""A stop signal before the command began (afc_cli/__main__.py): taken from the first moment,
not only once the command installs its handlers.

Each test sends the signal from inside the ``afc`` process at a fixed point of its start: as
it imports typer, the command-line layer's first import (a hook on Python's import system
that the script installs before it calls afc's entry point), so the moment does not depend
on the machine's speed."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from conftest import jobs, manifest

# afc's entry point, run as the console script runs it, with a signal sent to itself the
# moment the command-line layer starts importing typer (argv[1]: the signal's name)
AT_TYPER = """
import os, signal, sys
from importlib.abc import MetaPathFinder

SENT = getattr(signal, sys.argv[1])

class SignalAtTyper(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "typer":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), SENT)
        return None

sys.meta_path.insert(0, SignalAtTyper())
sys.argv = ["afc", *sys.argv[2:]]
from afc_cli.__main__ import main
main()
"""


def _started(afc, signame: str, *args: str, pid_namespace: bool = False):
    command = [sys.executable, "-c", AT_TYPER, signame, *args]
    if pid_namespace:
        command = ["unshare", "-rpf", *command]
    return subprocess.run(
        command, cwd=afc.cwd, env=afc.env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_stop_as_afc_starts_is_an_interruption_said_in_one_line(afc, signame):
    """SIGTERM and SIGHUP killed it without a word (exit -15 / -1: 143 / 129 in a shell,
    codes README does not document); Ctrl-C printed a Python traceback."""
    afc.write_manifest(manifest(jobs(1)))
    result = _started(afc, signame, "submit", "manifest.yaml")
    assert result.returncode == 130, (result.returncode, result.stderr)
    assert result.stderr == "afc: interrupted before the command began; nothing was changed\n"
    assert not (afc.cwd / "afc.db").exists()


def test_a_containers_first_process_is_stopped_by_an_early_sigterm(afc):
    """As PID 1 of its namespace (a container without --init), a signal afc has no handler
    for is dropped by the kernel: 'docker stop' just as it started was lost, and the run
    rendered (and paid) on until the SIGKILL ten seconds later."""
    probe = subprocess.run(["unshare", "-rpf", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("unprivileged PID namespaces are not available")
    afc.write_manifest(manifest(jobs(1)))
    result = _started(afc, "SIGTERM", "submit", "manifest.yaml", pid_namespace=True)
    assert result.returncode == 130, (result.returncode, result.stderr)
    assert "interrupted before the command began" in result.stderr
    assert not (afc.cwd / "afc.db").exists()  # was a run to its end: the job paid and stored


def test_a_sighup_that_came_ignored_stays_ignored(afc):
    """'nohup afc submit ...' is meant to outlive its terminal: afc's early handler leaves an
    ignored SIGHUP alone, and so the command's own handlers do (afc_cli/errors.py)."""
    afc.write_manifest(manifest(jobs(1)))
    result = subprocess.run(
        [sys.executable, "-c", AT_TYPER, "SIGHUP", "submit", "manifest.yaml"],
        cwd=afc.cwd,
        env=afc.env,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
    )
    assert result.returncode == 0, result.stderr
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]
