"""Outside audit 62f: a run's last pass over the webhook outbox (README "Webhooks": 'once
after it, at most 15 s') ended at the first short Retry-After it met.

In a night of cron'd runs (3,000 jobs, a receiver answering one POST in nineteen '503
Retry-After: 1'), a resume that found the batch done in 2 s posted 11 events, met that 503,
and ended with 300 due events pending: every later cron run the same, about 19 events a
run. The last pass waits out a Retry-After that ends within its 15 s, then posts on."""

from __future__ import annotations

import base64
import sqlite3

from conftest import manifest
from receiver import Receiver

SECRET = "whsec_" + base64.b64encode(b"afc test secret, 32 bytes long!!").decode()


def test_a_short_retry_after_does_not_end_the_runs_last_pass(afc):
    receiver = Receiver().start()
    # the first POST is asked to come back in a second; every other one is taken
    receiver.script = [(503, 0.0, {"Retry-After": "1"})]
    try:
        data = manifest([{"key": f"shot-{i:02d}", "prompt": f"p{i}"} for i in range(20)])
        data["webhook"] = {"url": receiver.url, "secret_env": "AFC_HOOK_SECRET", "timeout_s": 2.0}
        afc.write_manifest(data)
        afc.env["AFC_HOOK_SECRET"] = SECRET
        run = afc("submit", "manifest.yaml")
        assert run.returncode == 0, run.stderr
        conn = sqlite3.connect(afc.cwd / "afc.db")
        try:
            left = conn.execute(
                "SELECT COUNT(*) FROM deliveries WHERE status != 'delivered'"
            ).fetchone()[0]
        finally:
            conn.close()
        # the one answered 503 waits out its own backoff (the next run's); the other 19
        # are posted once the receiver's second is over
        assert left == 1, run.stderr
        assert [r.status for r in receiver.received].count(503) == 1
        assert [r.status for r in receiver.received].count(200) == 19
    finally:
        receiver.stop()
