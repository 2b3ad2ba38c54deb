"""examples/workers/afc-worker.service starts again a worker that a hang-up or a closed
journal stream stopped (outside audit 28b)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import jobs, manifest

UNIT = Path(__file__).resolve().parent.parent / "examples" / "workers" / "afc-worker.service"


def _settings() -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            name, value = line.split("=", 1)
            settings.setdefault(name, []).extend(value.split())
    return settings


def restarted(code: int) -> bool:
    """Whether systemd starts the worker again after it exits ``code`` on its own (not by
    'systemctl stop', which no Restart= setting restarts): systemd.service(5)'s table for the
    unit's Restart=, then RestartPreventExitStatus=, which wins over any Restart=."""
    settings = _settings()
    [restart] = settings["Restart"]
    if str(code) in settings.get("RestartPreventExitStatus", []):
        return False
    clean = code == 0 or str(code) in settings.get("SuccessExitStatus", [])
    return {"always": True, "on-failure": not clean, "no": False}[restart]


def test_a_service_worker_stopped_by_a_hangup_is_started_again(afc):
    """A worker without --until-idle drains and exits 0 at SIGHUP (an admin's 'kill -HUP'
    meant as a reload, a logrotate postrotate script) and when its stdout, the journal's
    stream, closes (journald restarted): Restart=on-failure never started it again, and the
    machine rendered nothing from then on, its unit 'inactive (dead)', no failure for an alert
    to see."""
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    proc = afc.popen("worker", "--poll", "0.1")
    try:
        deadline = time.time() + 60
        while afc.rows("SELECT status FROM jobs") != [("succeeded",)]:
            assert time.time() < deadline and proc.poll() is None, "the worker did not run"
            time.sleep(0.05)
        proc.send_signal(signal.SIGHUP)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr  # what the unit sees
    assert restarted(0)
    # a budget spent still leaves it stopped (tests/test_audit27c_unit.py), the rest restarts
    assert not restarted(4)
    assert restarted(1) and restarted(2) and restarted(130)


def test_the_unit_is_one_systemd_reads(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    unit = tmp_path / "afc-worker.service"
    # its ExecStart's afc is not installed here; everything else as shipped
    text = UNIT.read_text().replace("/usr/local/bin/afc worker", "/bin/true worker")
    unit.write_text(text)
    checked = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    assert checked.stderr == "", checked.stderr
