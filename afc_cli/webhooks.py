"""Webhooks: the outbox's rows, delivered at least once, signed as Standard Webhooks.

A delivery row is written by the ledger in the same transaction as the terminal update that
produced it (``Ledger._queue_delivery``). This module only drains due rows:

- Each row is claimed with a lease (a conditional update), so two afc processes draining at
  once never post the same row concurrently.
- The body is the row's stored envelope, byte for byte, every time; the headers are
  ``webhook-id`` (the row's stable id: receivers dedupe on it), ``webhook-timestamp`` and
  ``webhook-signature`` (``v1,`` + base64 HMAC-SHA256 of ``id.timestamp.body``), computed
  afresh for every try by the ``standardwebhooks`` reference library. The secret is read from
  the environment variable the manifest names and is never stored or printed.
- 2xx: delivered. 410 Gone: the endpoint is disabled (its pending rows end, none is posted
  again until a replay re-enables it). 429, 5xx, timeouts and connection errors: retried with
  full-jitter backoff honouring Retry-After, up to MAX_TRIES, then dead with the envelope kept.
  Other 4xx: dead at once (the receiver refuses the event; retrying will not change that).
- Delivery never runs inside a job's steps: ``afc submit``/``afc resume`` drain beside the
  batch and once after it (bounded in time), ``afc webhooks deliver`` drains alone (cron).
  A receiver that is down or slow is skipped for the rest of a pass after its first failure,
  so it never holds up renders or the run's end for long.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any

from afc_cli.attempts import backoff_delay, parse_retry_after
from afc_cli.errors import UsageError
from afc_cli.ledger import Ledger

MAX_TRIES = 8
BACKOFF_BASE_S = 5.0
BACKOFF_CAP_S = 600.0
LEASE_S = 120.0
FINAL_DRAIN_S = 15.0


def require_secrets(names: set[str]) -> None:
    """Stop before any job runs when a webhook secret variable is not set, or does not hold a
    ``whsec_`` secret the signing library accepts (found only at the first delivery, that would
    end a paid run with a delivery left leased). The value is never shown."""
    from afc_cli import secrets

    for name in names:
        secrets.register(name)  # its value is scrubbed from every text afc keeps or shows
    missing = sorted(name for name in names if not os.environ.get(name))
    if missing:
        raise UsageError(
            "webhook secret not set in the environment: "
            + ", ".join(missing)
            + " (the manifest names the variable; its value is a whsec_... secret)"
        )
    malformed = sorted(name for name in names if secret_problem(os.environ[name]))
    if malformed:
        raise UsageError(
            "webhook secret malformed in the environment: "
            + ", ".join(f"{name} ({secret_problem(os.environ[name])})" for name in malformed)
            + "; a webhook secret is whsec_ followed by base64, as receivers issue them"
        )


def secret_problem(value: str) -> str | None:
    """Why a webhook secret cannot sign, without quoting it; None if it can."""
    import binascii

    if not value.startswith("whsec_"):
        return "it does not start with whsec_"
    try:
        body = value[len("whsec_") :].rstrip("=")
        raw = base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    except (binascii.Error, ValueError):
        return "what follows whsec_ is not base64"
    if not raw:
        return "it is empty after whsec_"
    return None


def check_secrets(ledger: Ledger, job_ids: list[str] | None = None) -> None:
    require_secrets(ledger.webhook_secret_names(job_ids))


def signed_headers(secret: str, delivery_id: str, body: str, now: float) -> dict[str, str]:
    from standardwebhooks.webhooks import Webhook

    timestamp = int(now)
    signature = Webhook(secret).sign(
        delivery_id, dt.datetime.fromtimestamp(timestamp, tz=dt.UTC), body
    )
    return {
        "webhook-id": delivery_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature,
        "content-type": "application/json",
        "user-agent": "afc-webhooks",
    }


@dataclass
class DrainStats:
    delivered: int = 0
    retrying: int = 0
    dead: int = 0
    skipped: int = 0
    failed_urls: set[str] = field(default_factory=set)


class Deliverer:
    def __init__(self, ledger: Ledger, *, rand=random.random, clock=time.time):
        import httpx

        self.ledger = ledger
        self.rand = rand
        self.clock = clock
        # one client, no retries of its own (httpx makes none by default), explicit timeouts
        # per request from the row's timeout_s
        self.client = httpx.AsyncClient(follow_redirects=False)

    async def close(self) -> None:
        await self.client.aclose()

    async def drain(self, *, deadline: float | None = None, parallel: int = 8) -> DrainStats:
        """Deliver every due row once (this pass), until none is due or the deadline passes.

        Receivers are served in parallel, each one's rows one at a time: a receiver is never
        hit by a burst, and its 410 or its failure is known before its next row is tried."""
        stats = DrainStats()
        tried: set[str] = set()
        receivers = asyncio.Semaphore(parallel)
        while deadline is None or self.clock() < deadline:
            rows = [
                r
                for r in self.ledger.due_deliveries(self.clock(), limit=parallel * 8)
                if r["id"] not in tried and r["url"] not in stats.failed_urls
            ]
            if not rows:
                break
            tried.update(r["id"] for r in rows)
            by_url: dict[str, list[dict[str, Any]]] = {}
            for row in rows:
                by_url.setdefault(row["url"], []).append(row)

            async def serve(url_rows: list[dict[str, Any]]) -> None:
                async with receivers:
                    for row in url_rows:
                        if row["url"] in stats.failed_urls:
                            stats.skipped += 1
                            continue
                        if deadline is not None and self.clock() >= deadline:
                            return
                        await self._deliver(row, stats)

            await asyncio.gather(*(serve(url_rows) for url_rows in by_url.values()))
        return stats

    async def _deliver(self, row: dict[str, Any], stats: DrainStats) -> None:
        import httpx

        ledger = self.ledger
        now = self.clock()
        if not ledger.claim_delivery(row["id"], now, LEASE_S):
            return  # another drain has it
        if ledger.endpoint_disabled(row["url"]):
            ledger.delivery_outcome(
                row["id"], "dead", None, "the endpoint was disabled by a 410 Gone", now
            )
            stats.dead += 1
            return
        secret = os.environ.get(row["secret_env"])
        if not secret:
            ledger.release_delivery(
                row["id"], f"{row['secret_env']} is not set in the environment; not sent"
            )
            stats.skipped += 1
            return
        problem = secret_problem(secret)
        if problem:
            ledger.release_delivery(
                row["id"],
                f"{row['secret_env']} is not a valid webhook secret ({problem}); not sent",
            )
            stats.skipped += 1
            return
        headers = signed_headers(secret, row["id"], row["envelope"], now)
        status: int | None = None
        retry_after: float | None = None
        try:
            response = await self.client.post(
                row["url"],
                content=row["envelope"].encode(),
                headers=headers,
                timeout=httpx.Timeout(row["timeout_s"]),
            )
            status = response.status_code
            retry_after = parse_retry_after(response.headers.get("retry-after"))
            error = None if 200 <= status < 300 else f"HTTP {status}"
        except httpx.TimeoutException:
            error = f"no answer within {row['timeout_s']}s"
        except httpx.TransportError as exc:
            error = f"connection failed: {exc.__class__.__name__}"
        now = self.clock()
        tries = row["attempts"] + 1
        if status is not None and 200 <= status < 300:
            ledger.delivery_outcome(row["id"], "delivered", status, None, now)
            stats.delivered += 1
        elif status == 410:
            ledger.disable_endpoint(row["url"], f"410 Gone for {row['id']}", now)
            ledger.delivery_outcome(row["id"], "dead", status, "410 Gone: endpoint disabled", now)
            stats.dead += 1
        elif status is not None and 400 <= status < 500 and status != 429:
            ledger.delivery_outcome(row["id"], "dead", status, f"{error}: not retried", now)
            stats.dead += 1
        elif tries >= MAX_TRIES:
            ledger.delivery_outcome(
                row["id"], "dead", status, f"{error} (gave up after {tries} tries)", now
            )
            stats.dead += 1
        else:
            delay = backoff_delay(
                tries,
                base=BACKOFF_BASE_S,
                cap=BACKOFF_CAP_S,
                retry_after=retry_after,
                rand=self.rand,
            )
            ledger.delivery_retry(row["id"], status, error, now + delay, now)
            stats.retrying += 1
            if status is None or status >= 500:
                stats.failed_urls.add(row["url"])  # down or broken: skip it for this pass


async def run_beside(ledger: Ledger, stop: asyncio.Event, interval: float = 1.0) -> None:
    """Drain due deliveries while a batch runs, then once more after it (bounded)."""
    deliverer = Deliverer(ledger)
    try:
        while not stop.is_set():
            await deliverer.drain(deadline=time.time() + interval * 5)
            try:
                await asyncio.wait_for(stop.wait(), interval)
            except TimeoutError:
                pass
        await deliverer.drain(deadline=time.time() + FINAL_DRAIN_S)
    finally:
        await deliverer.close()


def deliver(ledger_path: str) -> DrainStats:
    """``afc webhooks deliver``: drain every due delivery, alone (for cron)."""
    ledger = Ledger(ledger_path, create=False)
    try:

        async def main() -> DrainStats:
            deliverer = Deliverer(ledger)
            try:
                with ledger.grouped(asyncio.get_running_loop()):
                    return await deliverer.drain()
            finally:
                await deliverer.close()

        return asyncio.run(main())
    finally:
        ledger.close()


def listing(ledger_path: str, dead_only: bool) -> list[dict[str, Any]]:
    ledger = Ledger(ledger_path, create=False)
    try:
        return ledger.deliveries(dead_only)
    finally:
        ledger.close()


def _by_prefix(ledger: Ledger, prefix: str) -> dict[str, Any]:
    """The one delivery whose id begins with ``prefix`` (as git takes a commit's prefix)."""
    found = ledger.delivery_ids_starting(prefix) if prefix else []
    if not found:
        raise UsageError(f"no webhook delivery {prefix!r} (see afc webhooks list)")
    if len(found) > 1:
        listed = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
        raise UsageError(
            f"{prefix!r} is the start of several webhook deliveries ({listed}); give more of the id"
        )
    return ledger.delivery(found[0])


def replay(ledger_path: str, delivery_id: str) -> DrainStats:
    """Re-queue a dead or delivered row (named by its id or a unique prefix of it) with its
    exact stored envelope (signed afresh, same webhook-id) and deliver it now. A replay also re-enables an endpoint a 410 disabled."""
    ledger = Ledger(ledger_path, create=False)
    try:
        row = ledger.delivery(delivery_id) or _by_prefix(ledger, delivery_id)
        delivery_id = row["id"]
        if row["status"] not in ("dead", "delivered"):
            raise UsageError(
                f"delivery {delivery_id!r} is {row['status']}; only dead or delivered ones "
                "are replayed (pending ones go out with afc webhooks deliver)"
            )
        ledger.requeue_delivery(delivery_id, time.time())
    finally:
        ledger.close()
    return deliver(ledger_path)
