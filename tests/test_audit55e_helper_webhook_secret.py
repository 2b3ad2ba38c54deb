"""Outside audit 55e: 8d7a0dd starts the file helper (afc_cli/offload.py) with the
environment less the variables the scrubber takes as secrets. A webhook's secret variable
is one of those only once the manifest naming it is read (``secrets.register``), and the
helper is started before that (``cli._prestart_helper``, so that it has booted by the first
job): a manifest's ``secret_env: STUDIO_HOOK_SIGNING`` (any name: README's example is one
that ends in SECRET, a studio's need not) left its whsec_ secret in the helper's
/proc/PID/environ, which makes no delivery and needs no secret."""

from __future__ import annotations

import signal

from conftest import frozen_at, manifest
from test_audit55c_helper_env import _helper_environ

HOOK_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def test_a_webhook_secret_of_any_name_is_not_in_the_helpers_environment(afc):
    data = manifest([{"key": "shot", "prompt": "a shot"}])
    data["webhook"] = {"url": "http://127.0.0.1:9/hooks", "secret_env": "STUDIO_HOOK_SIGNING"}
    afc.write_manifest(data)
    env = {"STUDIO_HOOK_SIGNING": HOOK_SECRET, "AFC_STALL_POINT": "before_request"}
    proc = afc.popen("submit", "manifest.yaml", env=env)
    try:
        frozen_at(proc)
        environ = _helper_environ(proc.pid)
    finally:
        proc.send_signal(signal.SIGKILL)  # the helper dies with it (PR_SET_PDEATHSIG)
        proc.wait()
    names = {entry.split(b"=", 1)[0] for entry in environ.split(b"\0")}
    assert b"PATH" in names  # what it needs is still there
    assert HOOK_SECRET.encode() not in environ
    assert b"STUDIO_HOOK_SIGNING" not in names
