"""Outside audit 25d: the examples each command's help gives, run as written."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time

import httpx
import pytest
from conftest import jobs, manifest


def _examples(afc, *command: str) -> list[str]:
    said = afc(*command, "-h").stdout
    return [line.strip() for line in said.split("Examples:", 1)[1].splitlines() if line.strip()]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="the example runs openssl")
def test_serve_help_for_another_host_leaves_its_user_the_token(afc):
    """'afc serve -h' gave 'AFC_SERVE_TOKEN=$(openssl rand -hex 16) afc serve --host 0.0.0.0':
    a token made inside the command line, known to no one, and the server never prints it
    (README: 'The token is never printed or logged'), so every request to the server the
    example started was 401: a reviewer on another machine could not open it, nor could the
    person who started it. The example's lines, run as written in one shell, now leave the
    token in the shell to open the address with."""
    pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    lines = [line for line in _examples(afc, "serve") if "AFC_SERVE_TOKEN" in line]
    assert any("--host 0.0.0.0" in line for line in lines), lines
    # 'afc' is the command under test; it listens on a free loopback port, not on 0.0.0.0
    script = "\n".join(
        [
            f'afc() {{ {shlex.join(afc.command())} "$@" --port 0 --json >url.json 2>err.txt &'
            " echo $! >pid; }",
            *(line.replace("--host 0.0.0.0", "--host 127.0.0.2") for line in lines),
            'printf %s "$AFC_SERVE_TOKEN" >token.txt',
        ]
    )
    env = {k: v for k, v in afc.env.items() if k != "AFC_SERVE_TOKEN"}
    done = subprocess.run(["bash", "-c", script], cwd=afc.cwd, env=env, timeout=60)
    assert done.returncode == 0
    pid = int((afc.cwd / "pid").read_text())
    try:
        for _ in range(300):
            said = (afc.cwd / "url.json").read_text()
            if said.strip() or not os.path.exists(f"/proc/{pid}"):
                break
            time.sleep(0.1)
        assert said.strip(), (afc.cwd / "err.txt").read_text()
        url = json.loads(said)["url"]
        token = (afc.cwd / "token.txt").read_text()
        assert httpx.get(url).status_code == 401  # the token is needed
        with httpx.Client() as client:
            first = client.get(url, params={"token": token})
            assert first.status_code == 303, first.text
            assert client.get(first.headers["location"]).status_code == 200
    finally:
        os.kill(pid, 15)
