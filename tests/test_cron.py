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
    assert "dlq\t0" in result.stdout  # one tab-separated row a figure


def test_wrapper_alerts_on_a_failed_job_and_skips_when_locked(afc):
    data = manifest([{"key": "bad", "prompt": "p", "params": {"fail": ["auth"]}}])
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    assert run_wrapper(afc).returncode == 1
    with open(afc.cwd / ".afc-cron.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        skipped = run_wrapper(afc)
    assert skipped.returncode == 75 and "skipping" in skipped.stdout


def test_a_lock_file_it_cannot_open_is_an_error_not_an_overlap(afc):
    """Found by an outside audit: a lock file the wrapper cannot open (a read-only or full
    folder, a lock left by another user) or a missing flock(1) was reported as 'previous run
    still active; skipping' with exit 75, on every run to come: nothing ran, and a monitor
    that takes 75 for a passing overlap never alerted."""
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    (afc.cwd / ".afc-cron.lock").mkdir()  # cannot be opened for writing, even by root
    result = run_wrapper(afc)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "cannot open the lock file" in result.stdout and "skipping" not in result.stdout
    assert afc.rows("SELECT status FROM jobs") == [("queued",)]  # nothing was run unlocked


def test_a_missing_flock_is_an_error_not_an_overlap(afc, tmp_path):
    bin_dir = tmp_path / "bin"  # bash and afc's interpreter, but no flock(1)
    bin_dir.mkdir()
    for tool in ("bash", "date", "dirname"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    result = run_wrapper(afc, PATH=f"{Path(sys.executable).parent}{os.pathsep}{bin_dir}")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "flock failed" in result.stdout and "skipping" not in result.stdout
