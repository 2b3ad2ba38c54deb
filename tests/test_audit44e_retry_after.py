"""A receiver's Retry-After holds every event to it, for the rest of the run (outside audit
44e). A receiver answering 429 with 'Retry-After: 60' asks for no request before then (RFC
9110); a run skipped it for the rest of that pass only, and posted the next event its batch
ended at its next pass, a second later: one POST a second into the same 429, each spending a
try of its event."""

from __future__ import annotations

import base64
import json

from conftest import manifest
from receiver import Receiver

SECRET = "whsec_" + base64.b64encode(b"afc test secret, 32 bytes long!!").decode()


def test_a_run_posts_nothing_more_to_a_receiver_until_its_retry_after_ran_out(afc):
    receiver = Receiver().start()
    receiver.default = (429, 0.0, {"Retry-After": "60"})
    try:
        afc.env["AFC_HOOK_SECRET"] = SECRET
        # the jobs end one after another over a few of the run's webhook passes (one a second)
        data = manifest(
            [{"key": f"shot-{i}", "prompt": "a", "params": {"latency_s": 0.7}} for i in range(6)]
        )
        data["webhook"] = {"url": receiver.url, "secret_env": "AFC_HOOK_SECRET", "timeout_s": 2.0}
        afc.write_manifest(data)
        run = afc("submit", "manifest.yaml", "--concurrency", "1", "--json")
        assert run.returncode == 0, run.stderr
        assert len(receiver.received) == 1, [round(r.at, 1) for r in receiver.received]
        tries = sorted(n for (n,) in afc.rows("SELECT attempts FROM deliveries"))
        assert tries == [0, 0, 0, 0, 0, 1]  # the others keep their tries
        assert json.loads(run.stdout)["webhooks"] == {"pending": 6, "dead": 0}
    finally:
        receiver.stop()
