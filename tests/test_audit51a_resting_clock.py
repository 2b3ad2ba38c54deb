"""Outside audit 51a: a receiver's Retry-After, held by a run, across a step of the wall
clock."""

from __future__ import annotations

import asyncio
import base64
import sqlite3
import time
import types

from conftest import manifest
from receiver import Receiver

SECRET = "whsec_" + base64.b64encode(b"afc test secret, 32 bytes long!!").decode()


def test_a_receivers_retry_after_is_not_held_longer_when_the_wall_clock_steps_back(
    afc, monkeypatch
):
    """A receiver answered 429 'Retry-After: 60': the run's Deliverer posts none of its
    events for 60 s (README, webhooks). It kept that minute's end on the wall clock, so an
    NTP step back of an hour during the run held every event to that receiver for an hour
    and a minute, left pending at the run's end. The minute is kept on the monotonic
    clock."""
    from afc_cli import webhooks
    from afc_cli.ledger import Ledger

    receiver = Receiver().start()
    receiver.default = (429, 0.0, {"Retry-After": "60"})
    try:
        data = manifest([{"key": "shot-1", "prompt": "a"}])
        data["webhook"] = {"url": receiver.url, "secret_env": "AFC_HOOK_SECRET", "timeout_s": 2.0}
        afc.write_manifest(data)
        monkeypatch.setenv("AFC_HOOK_SECRET", SECRET)
        afc.env["AFC_HOOK_SECRET"] = SECRET
        run = afc("submit", "manifest.yaml")
        assert run.returncode == 0, run.stderr
        assert len(receiver.received) == 1
        conn = sqlite3.connect(afc.cwd / "afc.db")
        with conn:  # due again, for this process
            conn.execute("UPDATE deliveries SET next_attempt_at = 0")
        conn.close()
        ledger = Ledger(str(afc.cwd / "afc.db"))
        try:
            deliverer = webhooks.Deliverer(ledger)

            async def drain():
                try:
                    return await deliverer.drain()
                finally:
                    await deliverer.close()

            asyncio.run(drain())
        finally:
            ledger.close()
        assert len(receiver.received) == 2
        assert deliverer._resting() == {webhooks.receiver_of(receiver.url)}
        # 61 s later by the monotonic clock, the wall clock having been set back an hour
        mono, wall = time.monotonic() + 61, time.time() - 3600 + 61
        deliverer.clock = lambda: wall
        monkeypatch.setattr(
            webhooks, "time", types.SimpleNamespace(time=lambda: wall, monotonic=lambda: mono)
        )
        assert deliverer._resting() == set()
    finally:
        receiver.stop()
