"""Outside audit 25d: examples/cron run as cron runs them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import jobs, manifest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "cron"
pytestmark = pytest.mark.skipif(shutil.which("flock") is None, reason="needs flock(1)")


def _cron_path(tmp_path: Path) -> str:
    """A PATH like cron's own (/usr/bin:/bin): the shell's tools, and no afc on it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "date", "dirname", "flock"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    return str(bin_dir)


def _wrapper(afc, path: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(EXAMPLES / "afc-cron.sh")],
        env={**afc.env, "PATH": path, "AFC_DIR": str(afc.cwd), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_wrapper_without_afc_on_cron_path_says_so_and_exits_2(afc, tmp_path):
    """cron runs its commands with PATH=/usr/bin:/bin; pip puts afc in /usr/local/bin or a
    virtualenv. The crontab line as the example gave it ran the wrapper there, whose bare
    'afc resume' ended 'command not found', exit 127 (none of the codes it lists), every ten
    minutes, rendering nothing. The wrapper now takes AFC_BIN (afc's path), says when it finds
    no afc, exit 2 like any usage problem, and the crontab sets PATH."""
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    path = _cron_path(tmp_path)

    missing = _wrapper(afc, path)
    assert missing.returncode == 2, missing.stdout + missing.stderr
    assert "no afc command 'afc'" in missing.stdout, missing.stdout
    assert "AFC_BIN" in missing.stdout
    assert afc.rows("SELECT status FROM jobs") == [("queued",), ("queued",)]

    # afc where cron does not look, named by AFC_BIN
    elsewhere = tmp_path / "venv" / "bin"
    elsewhere.mkdir(parents=True)
    (elsewhere / "afc").symlink_to(Path(sys.executable).parent / "afc")
    done = _wrapper(afc, path, AFC_BIN=str(elsewhere / "afc"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("succeeded", 2)]
    assert "dlq\t0" in done.stdout


def test_the_example_crontab_puts_where_pip_installs_afc_on_path():
    """The crontab's PATH line names /usr/local/bin, where a system-wide pip install puts afc
    (and examples/workers/afc-worker.service runs it from)."""
    lines = (EXAMPLES / "crontab").read_text().splitlines()
    paths = [line.split("=", 1)[1] for line in lines if line.startswith("PATH=")]
    assert paths and "/usr/local/bin" in paths[0].split(os.pathsep), lines
    unit = (EXAMPLES.parent / "workers" / "afc-worker.service").read_text()
    assert "ExecStart=/usr/local/bin/afc " in unit
