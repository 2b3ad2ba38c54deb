"""Outside audit 55c (secrets): the file helper (afc_cli/offload.py), the one child process afc
starts, is given no secret in its environment. It does local file work only (spool writes,
file:// stores, fsyncs) and needs none, yet it inherited every provider key, the AWS secret
and session token, PGPASSWORD and any other ``*_KEY``/``*_TOKEN``/``*_SECRET``/``*_PASSWORD``
variable: readable in its /proc/PID/environ, and in any crash report or core dump of it."""

from __future__ import annotations

import signal
from pathlib import Path

from conftest import frozen_at, manifest

SECRETS = {
    "OPENAI_API_KEY": "sk-proj-Zq8vK2mW9xR4tY7uP1oL6nB3cV5hJ0gF2dS8aQ4wE6rT9yU1iO3pA5sD7fG",
    "REPLICATE_API_TOKEN": "r8_Hx7Kp2Qm9Wz4Rt6Yv1Bn3Cd5Fg8Jk0Lq2Ms4",
    "FAL_KEY": "6f1c2a9e-3b4d-4e8f-9a0b-1c2d3e4f5a6b:9f8e7d6c5b4a39281706f5e4d3c2b1a0",
    "GEMINI_API_KEY": "AIzaSyB4xQ9mK2vL7pR3tW8nJ5cF1hG6dS0aZyX",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYzEXAMPLEKEY",
    "AWS_SESSION_TOKEN": "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQDx+Zk9",
    "PGPASSWORD": "pg-Pa55w0rd-for-the-ledger",
    "HOOK_SIGNING_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    # a proxy's password, in its variable's URL (the helper makes no network call)
    "HTTPS_PROXY": "http://studio:Pr0xyPassw0rd-7Kq2Zx9@127.0.0.1:9",
    # any variable holding a URL with its credentials (a ledger's, a studio's database's)
    "DATABASE_URL": "postgresql://app:DbPassw0rd-x9Lq@db.studio:5432/app",
}


def _helper_environ(pid: int) -> bytes:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    helpers = [
        child
        for child in children
        if b"afc_cli.offload" in Path(f"/proc/{child}/cmdline").read_bytes()
    ]
    assert len(helpers) == 1, children
    return Path(f"/proc/{helpers[0]}/environ").read_bytes()


def test_the_file_helper_is_started_without_any_secret_in_its_environment(afc):
    afc.write_manifest(manifest([{"key": "shot", "prompt": "a shot"}]))
    env = {**SECRETS, "AFC_STALL_POINT": "before_request"}
    proc = afc.popen("submit", "manifest.yaml", env=env)
    try:
        frozen_at(proc)  # the helper was started before the run (cli._prestart_helper)
        environ = _helper_environ(proc.pid)
    finally:
        proc.send_signal(signal.SIGKILL)  # the helper dies with it (PR_SET_PDEATHSIG)
        proc.wait()
    names = {entry.split(b"=", 1)[0] for entry in environ.split(b"\0")}
    assert b"PATH" in names  # what it needs is still there
    leaked = [name for name, value in SECRETS.items() if value.encode() in environ]
    assert b"Pr0xyPassw0rd" not in environ and b"DbPassw0rd" not in environ
    assert leaked == [], leaked
