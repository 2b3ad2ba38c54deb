"""The cron wrapper in examples/cron runs unattended: resumes, alerts, never overlaps."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import jobs, manifest

WRAPPER = Path(__file__).resolve().parent.parent / "examples" / "cron" / "afc-cron.sh"
pytestmark = pytest.mark.skipif(shutil.which("flock") is None, reason="needs flock(1)")


def run_wrapper(afc, **env):
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return subprocess.run(
        ["bash", str(WRAPPER)],
        env={**afc.env, "PATH": path, "AFC_DIR": str(afc.cwd), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_wrapper_resumes_and_reports(afc):
    afc.write_manifest(manifest(jobs(3)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    result = run_wrapper(afc)
    assert result.returncode == 0, result.stdout + result.stderr
    assert afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("succeeded", 3)]
    assert "dlq 0" in result.stdout


def test_wrapper_alerts_on_a_failed_job_and_skips_when_locked(afc):
    data = manifest([{"key": "bad", "prompt": "p", "params": {"fail": ["auth"]}}])
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    assert run_wrapper(afc).returncode == 1
    with open(afc.cwd / ".afc-cron.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        skipped = run_wrapper(afc)
    assert skipped.returncode == 75 and "skipping" in skipped.stdout
