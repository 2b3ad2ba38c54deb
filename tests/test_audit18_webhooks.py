"""Outside audit 18: webhook retry pacing. A real receiver on 127.0.0.1; the drain is the
one every afc process runs (``Deliverer.drain``), with its random source injected."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest
from conftest import jobs, manifest
from receiver import Receiver
from test_webhooks import SECRET

from afc_cli import webhooks
from afc_cli.ledger import Ledger


@pytest.fixture
def receiver():
    r = Receiver().start()
    yield r
    r.stop()


@pytest.mark.parametrize("retry_after", ["0", "Thu, 01 Jan 2015 00:00:00 GMT"])
def test_a_retry_after_of_now_does_not_spend_the_tries_at_once(
    afc, receiver, retry_after, monkeypatch
):
    """A receiver answering 429 (or 503) with 'Retry-After: 0', or a date already past, had its
    event posted again by the very next drain: an idle 'afc worker' drains every --poll
    seconds and a submit beside its batch every second, so the 8 tries were spent within
    seconds and the event was dead, where the backoff (5 s base, full jitter, 10 min cap)
    spreads them over minutes. A Retry-After is a floor over the backoff, never a shortcut."""
    afc.env["AFC_HOOK_SECRET"] = SECRET
    data = manifest(jobs(1))
    data["webhook"] = {"url": "http://127.0.0.1:9/down", "secret_env": "AFC_HOOK_SECRET"}
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    with sqlite3.connect(afc.cwd / "afc.db") as conn:  # due now, at the receiver, no try yet
        conn.execute(
            "UPDATE deliveries SET url = ?, next_attempt_at = 0, attempts = 0", (receiver.url,)
        )
    receiver.default = (429, 0.0, {"Retry-After": retry_after})
    monkeypatch.setenv("AFC_HOOK_SECRET", SECRET)
    ledger = Ledger(str(afc.cwd / "afc.db"), create=False)

    async def passes() -> float:
        deliverer = webhooks.Deliverer(ledger, rand=lambda: 0.5)
        try:
            began = ledger.lease_clock()
            for _ in range(webhooks.MAX_TRIES):  # an idle worker's drains, one per poll
                await deliverer.drain()
            return began
        finally:
            await deliverer.close()

    try:
        began = asyncio.run(passes())
        [row] = ledger.deliveries(False)
        row = ledger.delivery(row["id"])
    finally:
        ledger.close()
    assert len(receiver.received) == 1, "posted once; the next try waits its backoff"
    assert row["status"] == "pending" and row["attempts"] == 1
    # the first retry's backoff: uniform in [0, 5 s], here its middle
    assert row["next_attempt_at"] >= began + 0.5 * webhooks.BACKOFF_BASE_S


def test_a_retry_after_longer_than_the_backoff_is_waited_up_to_the_cap():
    """The floor: a Retry-After beyond the jittered backoff is waited (up to the cap), one
    within it changes nothing."""
    delay = webhooks.retry_delay
    assert delay(1, 120.0, rand=lambda: 0.5) == 120.0
    assert delay(1, 1.0, rand=lambda: 0.5) == 2.5
    assert delay(1, None, rand=lambda: 0.5) == 2.5
    assert delay(1, 10_000.0, rand=lambda: 0.5) == webhooks.BACKOFF_CAP_S
    assert delay(8, 0.0, rand=lambda: 1.0) == webhooks.BACKOFF_CAP_S
