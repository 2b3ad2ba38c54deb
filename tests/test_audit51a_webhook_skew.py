"""Outside audit 51a: a receiver refusing a webhook signed by a host whose clock is off."""

from __future__ import annotations

import base64

from conftest import manifest
from receiver import Receiver
from test_audit_clock import shifted

SECRET = "whsec_" + base64.b64encode(b"afc test secret, 32 bytes long!!").decode()


def test_a_refusal_of_a_webhook_signed_by_a_host_whose_clock_is_off_names_the_clock(afc):
    """Standard Webhooks receivers refuse a ``webhook-timestamp`` more than 5 minutes off
    their clock (a 400 or 401): on a host whose clock was 7 minutes behind, every event went
    dead at once as 'HTTP 401: not retried', and nothing said why: its user looked for a
    wrong secret. The receiver's answer dates itself (Date); the refusal now says how far
    this host's clock is off and what to do."""
    receiver = Receiver().start()
    receiver.default = (401, 0.0, {})
    try:
        afc.env["AFC_HOOK_SECRET"] = SECRET
        data = manifest([{"key": "shot-1", "prompt": "a"}])
        data["webhook"] = {"url": receiver.url, "secret_env": "AFC_HOOK_SECRET", "timeout_s": 2.0}
        afc.write_manifest(data)
        behind = afc.cwd / "wall-shift"
        behind.write_text("-420")
        run = afc("submit", "manifest.yaml", env=shifted(afc, wall=behind))
        assert run.returncode == 0, run.stderr
        assert len(receiver.received) == 1
        (dead,) = afc.json("webhooks", "list", "--dead")["deliveries"]
        assert "clock is 7 minutes behind the receiver's" in dead["last_error"], dead
        assert "afc webhooks replay --dead" in dead["last_error"], dead
    finally:
        receiver.stop()


def test_a_refusal_from_a_receiver_whose_clock_agrees_says_nothing_of_clocks():
    from email.utils import formatdate

    from afc_cli.webhooks import _skew_note

    assert _skew_note(1_800_000_000.0, formatdate(1_800_000_060.0, usegmt=True)) == ""
    assert _skew_note(1_800_000_000.0, None) == ""
    assert "ahead of" in _skew_note(1_800_000_000.0, formatdate(1_799_999_000.0, usegmt=True))
