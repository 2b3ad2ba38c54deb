"""Outside audit 65k: a run's end waits for a slow receiver once, not twice.

README "Webhooks": a run drains the outbox beside the batch and once after it, "at most
15 s", so that a receiver that is down or slow delays neither renders nor the end of a run
beyond one timeout. A receiver that answers 200, but slowly (a Slack bot behind a busy
proxy: 30 s, its ``timeout_s`` 60), is neither down nor timed out: the run waited for the
POST the pass beside the batch had under way when the renders ended, and then its last
pass started another into the same receiver and waited for that one too. Measured: 6 jobs
done 3 s into the run, the run ended 59 s after them (two 30 s answers); with 110 s
answers (``timeout_s`` 120), 219 s.

Now the last pass does not start a POST into a receiver whose last answer to this run took
longer than the pass has left: its events stay pending, tries unchanged, for the next run
or 'afc webhooks deliver'."""

from __future__ import annotations

import base64

from conftest import manifest
from receiver import Receiver

from afc_cli.webhooks import FINAL_DRAIN_S

SECRET = "whsec_" + base64.b64encode(b"afc test secret, 32 bytes long!!").decode()


def test_the_last_pass_does_not_post_again_into_a_receiver_slower_than_it(afc):
    # answers 200, each after longer than the run's last pass may take
    receiver = Receiver(default=(200, FINAL_DRAIN_S + 1.0, {})).start()
    try:
        data = manifest(
            [
                {"key": "early", "prompt": "a", "params": {"latency_s": 0.2}},
                {"key": "late", "prompt": "b", "params": {"latency_s": 1.5}},
            ]
        )
        data["webhook"] = {
            "url": receiver.url,
            "secret_env": "AFC_HOOK_SECRET",
            "timeout_s": FINAL_DRAIN_S * 3,
        }
        afc.write_manifest(data)
        afc.env["AFC_HOOK_SECRET"] = SECRET
        run = afc("submit", "manifest.yaml", timeout=300)
        assert run.returncode == 0, run.stderr
        # the one POST under way beside the batch was waited for and delivered; the last
        # pass started none after it (it started a second, and the run waited that out too)
        assert len(receiver.received) == 1, [r.body[:80] for r in receiver.received]
        rows = sorted(afc.rows("SELECT status, attempts FROM deliveries"))
        assert rows == [("delivered", 1), ("pending", 0)]
        assert "webhooks: 1 event(s) not delivered yet" in run.stderr
        # the next 'afc webhooks deliver' (no deadline of its own) posts it
        receiver.default = (200, 0.0, {})
        deliver = afc("webhooks", "deliver")
        assert deliver.returncode == 0, deliver.stderr
        assert len(receiver.received) == 2
    finally:
        receiver.stop()
