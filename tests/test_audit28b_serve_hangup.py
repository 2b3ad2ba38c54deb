"""afc serve stops cleanly at a hang-up, as at Ctrl-C and SIGTERM (outside audit 28b)."""

from __future__ import annotations

import json
import signal
import subprocess

import httpx
import pytest
from browser import Served
from conftest import jobs, manifest

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")


def test_a_hangup_stops_serve_cleanly(afc):
    """SIGHUP (the terminal or ssh session that started it closed, or a service manager's
    reload) killed afc serve at once: exit 129 by the shell's count (-1 here), no 'serve
    stopped', the requests in flight cut off."""
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    served = Served(afc)
    assert httpx.get(served.url).status_code == 200
    served.proc.send_signal(signal.SIGHUP)
    try:
        rest = served.proc.communicate(timeout=30)[1]
    except subprocess.TimeoutExpired:
        served.proc.kill()
        raise
    assert served.proc.returncode == 0, rest
    assert "serve stopped" in rest and "Traceback" not in rest


def test_a_hangup_the_moment_serve_says_its_address_stops_it(afc):
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    proc = subprocess.Popen(
        afc.command("serve", "--port", "0", "--json"),
        cwd=afc.cwd,
        env=afc.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert json.loads(proc.stdout.readline())["url"].startswith("http://127.0.0.1:")
    proc.send_signal(signal.SIGHUP)
    try:
        _, stderr = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 0 and "serve stopped" in stderr, stderr
