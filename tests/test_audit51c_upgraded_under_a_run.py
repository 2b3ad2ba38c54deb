"""Outside audit 51c: afc upgraded (pip install -U) under a run of it.

A cron'd 'afc resume' or an 'afc worker' runs for minutes or days; an upgrade of afc in that
time replaces its files under the running process. A module the process imports only after
that is the new version's, beside the old ones in memory: one that needs a name the old ones
lack fails to import (or, during pip's own window, is not there at all). A run imported
``afc_cli.inputs`` first as a paid render's answer came back (``pipeline._named_as``, the
adapters' ``image_type``), before the render was spooled: the upgrade stopped the run as "a bug
in afc", the render paid for and lost, and the next run paid for it again. A run now imports
every module of afc it needs after a paid call before its first one (``run.run_jobs``).

The child stands for that process: an audit hook refuses every import of an afc module once
its first provider call has begun, as a new version's incompatible module would fail.
"""

from __future__ import annotations

import subprocess
import sys

from conftest import jobs, manifest

# afc, with every import of an afc module after the first call refused
UPGRADED_UNDER_IT = r"""
import sys

called = []


def hook(event, args):
    if event == "open" and isinstance(args[0], str) and args[0].endswith("calls.log"):
        called.append(True)  # the local provider's call has begun
    elif event == "import" and called and str(args[0]).startswith("afc_cli"):
        raise ImportError(f"cannot import name 'NEW' from {args[0]!r} (a newer afc's file)")


sys.addaudithook(hook)
sys.argv = ["afc", *sys.argv[1:]]
from afc_cli.cli import main

main()
"""


def test_a_module_replaced_under_a_run_costs_no_paid_render(afc):
    afc.write_manifest(manifest(jobs(3)))
    admitted = afc("submit", "manifest.yaml", "--no-run")
    assert admitted.returncode == 0, admitted.stderr
    calls = afc.cwd / "calls.log"
    rounds = (["resume", "--concurrency", "1"], ["resume", "--json"], ["worker", "--until-idle"])
    for n, args in enumerate(rounds, start=1):
        ran = subprocess.run(
            [sys.executable, "-c", UPGRADED_UNDER_IT, *args],
            cwd=afc.cwd,
            env={**afc.env, "AFC_LOCAL_CALL_LOG": str(calls)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ran.returncode == 0, ran.stderr
        assert "a bug in afc" not in ran.stderr and "Traceback" not in ran.stderr, ran.stderr
        assert afc.rows("SELECT DISTINCT status FROM jobs") == [("succeeded",)]
        afc.write_manifest(manifest(jobs(3 * (n + 1))))
        assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    # every job rendered once: none paid for again after a lost render
    made = calls.read_text().splitlines()
    assert len(made) == len(set(made)) == 9, made
