"""Webhooks: the outbox's rows, delivered at least once, signed as Standard Webhooks.

A delivery row is written by the ledger in the same transaction as the terminal update that
produced it (``Ledger._queue_delivery``). This module only drains due rows:

- Any afc process of the ledger drains it (``afc worker`` on every host, ``submit``/``resume``,
  ``afc webhooks deliver``). Due rows are claimed in batches (``Ledger.claim_deliveries``:
  ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so workers on several hosts take different rows
  without waiting on each other) with a lease on the ledger's clock (the database server's on
  PostgreSQL) of the row's timeout plus a margin (``lease_margin``). Right before its POST a
  row's lease is checked and extended (``Ledger.hold_delivery``): a row whose lease lapsed
  while it waited its turn and that another process took is not posted. The outcome is
  written only while this process still owns the row (the owner is the fencing token), so a
  process that lost a row never overwrites the new owner's outcome. No row is posted twice
  while a live process's lease on it is live; a process killed mid-POST leaves its row to be
  posted again once its lease expires (at once by a process of the same host, which can tell
  it died: ``owner.owner_is_dead``, as for jobs), one stopped cleanly (SIGTERM, Ctrl-C) gives
  it back at once: at least once, with the same ``webhook-id``.
- Each POST is bounded in all by the row's ``timeout_s`` (connect, send and answer together),
  so it always ends within its lease.
- The body is the row's stored envelope, byte for byte, every time; the headers are
  ``webhook-id`` (the row's stable id: receivers dedupe on it), ``webhook-timestamp`` and
  ``webhook-signature`` (``v1,`` + base64 HMAC-SHA256 of ``id.timestamp.body``), computed
  afresh for every try by the ``standardwebhooks`` reference library. The secret is read from
  the environment variable the manifest names and is never stored or printed.
- 2xx: delivered. 410 Gone: the endpoint is disabled (its pending rows end, none is posted
  again until a replay re-enables it). 429, 5xx, timeouts and connection errors: retried with
  full-jitter backoff honouring Retry-After as a floor (``retry_delay``), up to MAX_TRIES,
  then dead with the envelope kept.
  Other 4xx: dead at once (the receiver refuses the event; retrying will not change that).
  Redirects are never followed (a signed event goes only to the URL the manifest names): a
  301 or 308 is dead at once, naming where it points; another 3xx is retried as a 5xx is.
  An answer's body is never read (``Deliverer._post``).
- Delivery never runs inside a job's steps: ``afc submit``/``afc resume`` drain beside the
  batch and once after it (bounded in time), ``afc webhooks deliver`` drains alone (cron).
  A receiver that is down or slow is skipped for the rest of a pass after its first failure,
  so it never holds up renders or the run's end for long; one that answers a 5xx at once
  (up, but failing some events: not a 502, 503 or 504, within FAST_ANSWER_S) after
  FAST_FAILURES_PER_PASS in a row. A receiver is the server a URL reaches, its scheme, host
  and port (``receiver_of``): the URLs of one (a callback per job) are posted one at a time,
  skipped together, spared together for its Retry-After. A 410 ends the URL it answered for.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import os
import random
import signal
import ssl
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from afc_cli.attempts import backoff_delay, parse_retry_after
from afc_cli.errors import UsageError
from afc_cli.ledger import Ledger
from afc_cli.secrets import scrub

MAX_TRIES = 8
# a receiver that answers it has moved for good: not followed, and not tried again
PERMANENT_REDIRECTS = (301, 308)
BACKOFF_BASE_S = 5.0
BACKOFF_CAP_S = 600.0
FINAL_DRAIN_S = 15.0
# A receiver that answers at once with a 5xx (not 503, no Retry-After) is up: the event may
# be what it fails on. Its other events go on in the pass until this many such answers in a
# row. Skipped at its first one, a receiver failing one event in fifty had each pass (a cron
# 'afc webhooks deliver', a run's every second) post a few dozen events and stop: a backlog
# of thousands took hours to reach it.
FAST_FAILURES_PER_PASS = 3
# ... and only an answer that came at once says it is up: a 5xx that took longer (a receiver
# working to its timeout and then failing) is a slow receiver, and three of those a pass
# tripled the pass's wait on it. A 502 or 504 is a gateway saying the receiver behind it is
# down or slow, as a 503 says, whatever its speed.
FAST_ANSWER_S = 1.0
DOWN_STATUSES = (502, 503, 504)


def receiver_of(url: str) -> str:
    """The receiver a webhook URL reaches: its scheme, host and port (its origin), the unit
    whose state a failure tells (down, slow, asking to be spared for a Retry-After). Jobs may
    name one receiver by URLs of their own (``.../hooks/<key>``, a callback per shot): taken
    URL by URL, a receiver that hung got every one of its events' POSTs at once, eight at a
    time, each spending one of the event's tries, and one answering 429 with Retry-After: 60
    a POST per job from the same run, each into the same 429."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # ends dead, 'not sent: the URL ...' (``webhook_url_problem``)
        return url
    scheme = parts.scheme.lower()
    port = port or {"http": 80, "https": 443}.get(scheme)
    return f"{scheme}://{(parts.hostname or '').lower()}:{port}"


def retry_delay(tries: int, retry_after: float | None, *, rand=random.random) -> float:
    """Seconds until a delivery's next try after ``tries`` failed ones: the full-jitter
    backoff, or the receiver's Retry-After where that is longer (up to the cap). A Retry-After
    is a floor, never a shortcut: a receiver answering 429 or 503 with ``Retry-After: 0`` (or
    a date already past) had its event posted again by the very next drain (an idle worker's
    every --poll seconds, a run's every second), its MAX_TRIES spent within seconds. The
    rule is ``attempts.backoff_delay``'s, as for a provider's attempts."""
    return backoff_delay(
        tries, base=BACKOFF_BASE_S, cap=BACKOFF_CAP_S, retry_after=retry_after, rand=rand
    )


def _what_it_met(exc: BaseException) -> str:
    """A failed connection's message, with the reason of the socket error under it when the
    message does not give it: httpx's connector says 'All connection attempts failed' for
    every connect that failed, a receiver down (refused) as a network that is unreachable,
    and keeps the socket's own error as its cause."""
    said = str(exc)
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        # an ssl error's errno is the library's own code, not the system's: its text says it
        if isinstance(cause, ssl.SSLError):
            break
        if isinstance(cause, OSError) and cause.errno and cause.errno > 0:
            reason = os.strerror(cause.errno)
            if reason.lower() in said.lower():
                return said
            return f"{said}: {reason}" if said else reason
        cause = cause.__cause__ or cause.__context__
    return said


def webhook_url_problem(value: str) -> str | None:
    """Why no POST can reach this webhook URL, or None: the manifest refuses it before
    anything is written, and a delivery admitted before this check was made ends dead with
    it, rather than break every run that tries it (a port past 65535 crashed the drain)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value)
        _ = parts.port  # a port that is not a number, or past 65535, raises here
    except ValueError as exc:
        return f"must be an http:// or https:// URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return "must be an http:// or https:// URL"
    if not parts.hostname or any(char.isspace() or not char.isprintable() for char in value):
        return "must be an http:// or https:// URL naming a host, without spaces or controls"
    import httpx

    try:
        _ = httpx.URL(value).host  # what the POST parses and decodes: IDNA refuses a host here
    except (httpx.InvalidURL, ValueError) as exc:  # IDNAError is a ValueError
        return f"must be an http:// or https:// URL with a valid host name ({exc})"
    return None


def lease_margin() -> float:
    """How long a delivery's lease outlasts its POST's timeout: the ledger's margin (120 s,
    ``Ledger.DELIVERY_LEASE_MARGIN_S``), or ``AFC_LEASE_S`` when that is shorter, so a
    process killed mid-POST leaves its row to others as soon as it leaves its jobs."""
    from afc_cli.run import lease_seconds

    return min(Ledger.DELIVERY_LEASE_MARGIN_S, lease_seconds())


def require_secrets(names: set[str], where: str | None = None) -> None:
    """Stop before any job runs when a webhook secret variable is not set, or does not hold a
    ``whsec_`` secret the signing library accepts (found only at the first delivery, that would
    end a paid run with a delivery left leased). The value is never shown. ``where``: the
    manifest file and field naming the variables, put first in the message."""
    from afc_cli import secrets

    for name in names:
        secrets.register(name)  # its value is scrubbed from every text afc keeps or shows
    prefix = f"{where}: " if where else ""
    missing = sorted(name for name in names if not os.environ.get(name))
    if missing:
        raise UsageError(
            f"{prefix}webhook secret not set in the environment: "
            + ", ".join(missing)
            + " (the manifest names the variable; its value is a whsec_... secret)"
        )
    malformed = sorted(name for name in names if secret_problem(os.environ[name]))
    if malformed:
        raise UsageError(
            f"{prefix}webhook secret malformed in the environment: "
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


# how far a receiver lets a webhook-timestamp be from its own clock (Standard Webhooks'
# libraries: 5 minutes either way)
TIMESTAMP_TOLERANCE_S = 5 * 60


def _skew_note(signed_at: float, date: str | None) -> str:
    """What a refusal (a 4xx) owes to this host's clock: a receiver refuses a signature whose
    ``webhook-timestamp`` is more than ``TIMESTAMP_TOLERANCE_S`` off its own clock, and its
    answer's ``Date`` says how far off that is. '' when it does not say so."""
    from afc_cli.attempts import _http_date

    theirs = _http_date(date)
    if theirs is None or abs(signed_at - theirs) <= TIMESTAMP_TOLERANCE_S:
        return ""
    skew = signed_at - theirs
    return (
        f" (this host's clock is {abs(skew) / 60:.0f} minutes "
        f"{'ahead of' if skew > 0 else 'behind'} the receiver's, by its answer's Date: a "
        "receiver refuses a webhook-timestamp more than 5 minutes off its clock; set this "
        "host's clock (NTP), then 'afc webhooks replay --dead')"
    )


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


class _ProxyTransport:
    """httpx's transport through the proxy the environment names for each request's URL,
    read as the provider calls and botocore read it (``providers.base.named_proxy``): never
    ``ALL_PROXY``. httpx's own reading of the environment takes ``ALL_PROXY`` too, which often
    names a SOCKS proxy set for other tools: the client could not be made without the
    ``socksio`` package, and every run with a webhook ended, after its paid renders, with
    'unexpected error: ImportError ... (a bug in afc)', its summary unprinted, and no
    'afc webhooks deliver' could send an event. A SOCKS proxy named for the URL's scheme is a
    connection that failed (its row retried, the reason in its ``last_error``)."""

    def __init__(self) -> None:
        import httpx

        # SSL_CERT_FILE / SSL_CERT_DIR read as httpx's own transport reads them
        self.direct = httpx.AsyncHTTPTransport(trust_env=True)
        self.proxied: dict[str, Any] = {}

    def _for(self, url: Any) -> Any:
        import httpx

        from afc_cli.providers.base import named_proxy

        proxy = named_proxy(url.scheme, url.host or None, url.port)
        if proxy is None:
            return self.direct
        if proxy not in self.proxied:
            try:
                self.proxied[proxy] = httpx.AsyncHTTPTransport(proxy=proxy, trust_env=True)
            # a socks5:// one without socksio; one httpx cannot read ('http://[::1', a bracket
            # missing: its InvalidURL, no ValueError, ended a run after its paid renders as
            # 'unexpected error ... a bug in afc', its summary unprinted)
            except (ImportError, ValueError, httpx.InvalidURL) as exc:
                raise httpx.UnsupportedProtocol(
                    f"{url.scheme.upper()}_PROXY names a proxy webhooks cannot go through "
                    f"({exc}); name an http one, or list the receiver's host in NO_PROXY"
                ) from None
        return self.proxied[proxy]

    async def handle_async_request(self, request: Any) -> Any:
        return await self._for(request.url).handle_async_request(request)

    async def __aenter__(self) -> _ProxyTransport:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for transport in (self.direct, *self.proxied.values()):
            await transport.aclose()


@dataclass
class DrainStats:
    delivered: int = 0
    retrying: int = 0
    dead: int = 0
    skipped: int = 0
    # receivers (``receiver_of``) given up on for the rest of the pass
    failed: set[str] = field(default_factory=set)
    slow: set[str] = field(default_factory=set)  # of those, the ones that timed out
    # receiver -> its fast 5xx answers in a row in this pass (``FAST_FAILURES_PER_PASS``)
    failing: dict[str, int] = field(default_factory=dict)
    # secret variables whose events were left pending unsigned: name -> why (never the value)
    secret_problems: dict[str, str] = field(default_factory=dict)
    # due events left pending under another live afc process's claim (or another host's,
    # which may have died: its lease decides), and when the last of those claims runs out
    held: int = 0
    held_until: float | None = None
    # pending events not due yet (``afc webhooks deliver`` posts due ones only), and when the
    # first of them is due
    not_due: int = 0
    next_due_at: float | None = None


class Deliverer:
    def __init__(
        self,
        ledger: Ledger,
        *,
        rand=random.random,
        clock=time.time,
        margin_s: float | None = None,
    ):
        import httpx

        self.ledger = ledger
        self.rand = rand
        self.clock = clock  # this host's: the pass's deadline and the signatures' timestamps
        self.margin_s = lease_margin() if margin_s is None else margin_s
        self.unset_secrets: set[str] = set()  # secret variables found unset (not claimed again)
        # receiver (``receiver_of``) -> when (``time.monotonic``: a wall clock stepped back
        # an hour during a run held it an hour longer) the Retry-After it answered runs out:
        # none of its events is posted by this process before then (``_resting``)
        self.resting: dict[str, float] = {}
        # receiver -> the URLs of it this process has claimed rows of: a receiver skipped
        # is left unclaimed by these (a URL of it not met yet is claimed once, then let go)
        self.urls_of: dict[str, set[str]] = {}
        # receiver -> how long (``clock``) its last answered POST from this process took: a
        # run's last pass (``drain``'s ``bounded``) does not start one it would not see end
        self.took: dict[str, float] = {}
        # whether a POST a cancel cuts short is given back at once (a stop), or stays leased
        # until its lease runs out (``worker.drain_while_idle`` giving way to jobs)
        self.give_back = True
        # one client, no retries of its own (httpx makes none by default), explicit timeouts
        # per request from the row's timeout_s; the environment's proxy as the provider
        # calls read it (``_ProxyTransport``)
        self.client = httpx.AsyncClient(follow_redirects=False, transport=_ProxyTransport())

    async def close(self) -> None:
        await self.client.aclose()

    async def drain(
        self,
        *,
        deadline: float | None = None,
        parallel: int = 8,
        failed: set[str] | frozenset[str] = frozenset(),
        only: str | None = None,
        wait_rest: bool = False,
        bounded: bool = False,
    ) -> DrainStats:
        """Deliver every row due when the pass began once, until none is left or the deadline
        passes.

        Rows are claimed in batches; receivers (``receiver_of``: a URL's scheme, host and
        port) are served in parallel, each one's rows one at a time: a receiver is never hit
        by a burst from one process, and its 410 or its failure is known before its next row
        is tried. Claimed rows this pass does not post
        (a receiver given up on, the deadline, a stop that cancels the pass) are released at
        once for the next pass or another process. A row tried in this pass is not due again
        within it: a retry is scheduled after the pass began, a row released for want of its
        secret is due from its release on. ``failed``: receivers that timed out in the
        pass just before, not tried again in this one (a run's last pass does not wait out a
        slow receiver's timeout a second time). ``only``: that delivery alone (a replay).
        ``wait_rest`` (a run's last pass): a receiver resting on its Retry-After, with events
        due, is waited for when its rest ends before the deadline, then posted to: the last
        pass ended at the first 'Retry-After: 1', leaving every other due event to the next
        run (a cron'd resume of a finished night: 11 posted, 300 left, run after run).
        ``bounded`` (a run's last pass too): a receiver whose last answer to this process
        took longer than what is left before the deadline is not posted to in this pass (its
        rows released, their tries unchanged): its POST would hold the run's end past the
        deadline. A receiver answering 200 after 30 s (its ``timeout_s`` 60) had a run end
        one POST after its renders (the one the pass beside the batch had under way) and
        then another, which the last pass started as it began: 59 s, and with 110 s answers
        (``timeout_s`` 120) 219 s, where README promises at most one timeout."""
        stats = DrainStats()
        stats.failed.update(failed)
        ledger = self.ledger
        began = ledger.lease_clock()
        tried: set[str] = set()
        receivers = asyncio.Semaphore(parallel)
        while deadline is None or self.clock() < deadline:
            rows = ledger.claim_deliveries(
                parallel * 8,
                self.margin_s,
                due_before=began,
                skip_urls=self._urls(stats.failed | self._resting()),
                skip_secrets=tuple(sorted(self.unset_secrets)),
                only=only,
            )
            fresh = [r for r in rows if r["id"] not in tried]
            for row in rows:
                if row["id"] in tried:  # retried at once (a zero backoff): the next pass
                    ledger.release_delivery(row["id"])
            if not fresh:
                rest = self._rest_to_wait(stats, began, deadline) if wait_rest else None
                if rest is None:
                    break
                await asyncio.sleep(rest)
                continue
            tried.update(r["id"] for r in fresh)
            by_receiver: dict[str, list[dict[str, Any]]] = {}
            for row in fresh:
                receiver = receiver_of(row["url"])
                self.urls_of.setdefault(receiver, set()).add(row["url"])
                by_receiver.setdefault(receiver, []).append(row)
            unposted = {row["id"] for row in fresh}  # claimed, and no turn to post them yet

            async def serve(
                receiver: str, its_rows: list[dict[str, Any]], unposted: set[str]
            ) -> None:
                pending = list(its_rows)
                try:
                    async with receivers:
                        while pending:
                            row = pending[0]
                            if receiver in stats.failed or receiver in self._resting():
                                stats.skipped += len(pending)
                                break
                            if deadline is not None and self.clock() >= deadline:
                                break
                            if (
                                bounded
                                and deadline is not None
                                and self.took.get(receiver, 0.0) > deadline - self.clock()
                            ):
                                stats.failed.add(receiver)  # not claimed again in this pass
                                stats.skipped += len(pending)
                                break
                            pending.pop(0)
                            unposted.discard(row["id"])
                            await self._deliver(row, receiver, stats)
                finally:
                    for row in pending:  # not posted in this pass: free for the next
                        unposted.discard(row["id"])
                        tried.discard(row["id"])  # (or for this one, after a rest waited out)
                        ledger.release_delivery(row["id"])

            try:
                await asyncio.gather(
                    *(serve(receiver, rows, unposted) for receiver, rows in by_receiver.items())
                )
            finally:
                # a stop that cancelled the pass before a receiver's turn began (acted on
                # right after the claim): that turn never ran, nor its release above
                for delivery_id in sorted(unposted):
                    ledger.release_delivery(delivery_id)
        return stats

    def _resting(self) -> set[str]:
        """The receivers whose Retry-After has not run out: skipped by every pass of this
        process until then, not only by the pass that met it. A receiver answering 429 (or
        503) with 'Retry-After: 60' asks for no request before then, as HTTP means it (RFC
        9110), not for that one event alone: a run posted its next event at its next pass a
        second later, and every event its batch ended meanwhile, one a second, each into the
        same 429 and each spending one of its tries."""
        now = time.monotonic()
        return {receiver for receiver, until in self.resting.items() if until > now}

    def _rest_to_wait(
        self, stats: DrainStats, due_before: float, deadline: float | None
    ) -> float | None:
        """Seconds until the first receiver resting on its Retry-After (one that answered,
        not one that timed out) with an event due before ``due_before`` may be posted to
        again, when that is before ``deadline``; None when there is none to wait for. The
        receivers waited for are no longer given up on in this pass."""
        now = time.monotonic()
        left = None if deadline is None else deadline - self.clock()
        ends = {
            receiver: until
            for receiver, until in self.resting.items()
            if until > now and receiver not in stats.slow and (left is None or until - now < left)
        }
        if not ends:
            return None
        due = self.ledger.due_delivery_urls(self._urls(set(ends)), due_before)
        waited = {r: ends[r] for r in ends if self.urls_of.get(r, set()) & due}
        if not waited:
            return None
        for receiver in waited:
            stats.failed.discard(receiver)
            stats.failing.pop(receiver, None)
        return max(0.0, min(waited.values()) - now)

    def _urls(self, receivers: set[str]) -> tuple[str, ...]:
        """The URLs of ``receivers`` this process has met: the claim leaves their rows."""
        return tuple(sorted(url for r in receivers for url in self.urls_of.get(r, ())))

    async def _post(self, row: dict[str, Any], headers: dict[str, str]) -> Any:
        """POST a row's envelope; the answer's status and headers are read, its body never (a
        receiver's answer may be of any size, and afc needs nothing from it)."""
        import httpx

        async with self.client.stream(
            "POST",
            row["url"],
            content=row["envelope"].encode(),
            headers=headers,
            timeout=httpx.Timeout(row["timeout_s"]),
        ) as response:
            return response

    async def _deliver(self, row: dict[str, Any], receiver: str, stats: DrainStats) -> None:
        import httpx

        ledger = self.ledger
        row = ledger.hold_delivery(row["id"], self.margin_s)
        if row is None:
            stats.skipped += 1  # another process took it after our lease lapsed, or ended it
            return
        now = self.clock()
        if ledger.endpoint_disabled(row["url"]):
            if ledger.delivery_outcome(
                row["id"], "dead", None, "the endpoint was disabled by a 410 Gone", now
            ):
                stats.dead += 1
            return
        bad_url = webhook_url_problem(row["url"])
        if bad_url:
            if ledger.delivery_outcome(
                row["id"], "dead", None, f"not sent: the URL {bad_url}", now
            ):
                stats.dead += 1
            return
        # its value scrubbed from what the receiver answers (a Location quoting it back), as
        # a run's are (``require_secrets``): 'afc webhooks deliver', a replay and an idle
        # worker's drain of another batch's events named none, and a variable whose name does
        # not end in SECRET, KEY or TOKEN was no secret to the scrubber: its base64 quoted in
        # a 301's Location was kept in last_error, the ledger and 'afc webhooks list --json'
        from afc_cli import secrets

        secrets.register(row["secret_env"])
        secret = os.environ.get(row["secret_env"])
        if not secret:
            self.unset_secrets.add(row["secret_env"])  # its other rows: left alone this run
            ledger.release_delivery(
                row["id"], f"{row['secret_env']} is not set in the environment; not sent"
            )
            stats.secret_problems[row["secret_env"]] = "is not set in the environment"
            stats.skipped += 1
            return
        problem = secret_problem(secret)
        if problem:
            ledger.release_delivery(
                row["id"],
                f"{row['secret_env']} is not a valid webhook secret ({problem}); not sent",
            )
            stats.secret_problems[row["secret_env"]] = f"is not a valid webhook secret ({problem})"
            stats.skipped += 1
            return
        headers = signed_headers(secret, row["id"], row["envelope"], now)
        status: int | None = None
        retry_after: float | None = None
        began = time.monotonic()
        try:
            # the whole POST within timeout_s (httpx's timeout is per phase), so it ends
            # within the lease hold_delivery just extended
            response = await asyncio.wait_for(self._post(row, headers), row["timeout_s"])
            self.took[receiver] = max(0.0, self.clock() - now)
            status = response.status_code
            retry_after = parse_retry_after(
                response.headers.get("retry-after"), date=response.headers.get("date")
            )
            error = None if 200 <= status < 300 else f"HTTP {status}"
            if 400 <= status < 500 and status not in (410, 429):
                error += _skew_note(now, response.headers.get("date"))
            if status in PERMANENT_REDIRECTS:
                moved = scrub(str(response.headers.get("location", "")))[:300]
                error += f" to {moved!r}: not followed (an event goes only where the manifest says)"
        except (httpx.TimeoutException, TimeoutError):
            error = f"no answer within {row['timeout_s']}s"
            stats.slow.add(receiver)
        except httpx.TransportError as exc:
            # with what the connection met: a receiver down ('Connection refused'), a host
            # name that does not resolve and a certificate this host does not trust
            # (CERTIFICATE_VERIFY_FAILED: SSL_CERT_FILE names the CA) all read 'ConnectError'
            said = " ".join(scrub(_what_it_met(exc)).split())[:200]
            error = f"connection failed: {exc.__class__.__name__}" + (f" ({said})" if said else "")
        except asyncio.CancelledError:
            # a stop (SIGTERM, Ctrl-C) cut the POST short: whether the receiver got it is
            # unknown, so the row goes back in its place, its tries unchanged, for the next
            # run to post again (at least once, same webhook-id), rather than stay leased to
            # a stopped process until its lease runs out (a ledger that fails now: it does).
            # Not when this process goes on (``give_back`` False: an idle worker's drain
            # giving way to jobs), whose next drain would post it again at once into a
            # receiver perhaps still holding the first
            if self.give_back:
                with contextlib.suppress(Exception):
                    ledger.release_delivery(row["id"])
            raise
        now = self.clock()
        tries = row["attempts"] + 1
        if retry_after and not (status is not None and 200 <= status < 300):
            until = time.monotonic() + min(retry_after, BACKOFF_CAP_S)
            self.resting[receiver] = max(until, self.resting.get(receiver, until))
        # Each outcome is written only while this process still owns the row; if another
        # took it over meanwhile (this one stalled past its lease), the new owner's stands.
        if status is not None and 200 <= status < 300:
            stats.failing.pop(receiver, None)
            if ledger.delivery_outcome(row["id"], "delivered", status, None, now):
                stats.delivered += 1
        elif status == 410:
            ledger.disable_endpoint(row["url"], f"410 Gone for {row['id']}", now)
            if ledger.delivery_outcome(
                row["id"], "dead", status, "410 Gone: endpoint disabled", now
            ):
                stats.dead += 1
        elif status is not None and (
            400 <= status < 500 and status != 429 or status in PERMANENT_REDIRECTS
        ):
            if ledger.delivery_outcome(row["id"], "dead", status, f"{error}: not retried", now):
                stats.dead += 1
        else:
            if tries >= MAX_TRIES:
                if ledger.delivery_outcome(
                    row["id"], "dead", status, f"{error} (gave up after {tries} tries)", now
                ):
                    stats.dead += 1
            else:
                delay = retry_delay(tries, retry_after, rand=self.rand)
                if ledger.delivery_retry(row["id"], status, error, delay):
                    stats.retrying += 1
            # down, slow, or asking to be spared (a 429 or 503, a Retry-After, a temporary
            # redirect, a 502 or 504 from its gateway, a 5xx that took its time): its other
            # rows wait for the next pass, not posted one after another into the same
            # answer; up and failing at once (a 500): after a few in a row
            fast = (
                status is not None
                and status >= 500
                and status not in DOWN_STATUSES
                and not retry_after
                and time.monotonic() - began < FAST_ANSWER_S
            )
            failing = stats.failing[receiver] = stats.failing.get(receiver, 0) + 1
            if not fast or failing >= FAST_FAILURES_PER_PASS:
                stats.failed.add(receiver)


async def run_beside(ledger: Ledger, stop: asyncio.Event, interval: float = 1.0) -> None:
    """Drain due deliveries while a batch runs, then once more after it (bounded)."""
    deliverer = Deliverer(ledger)
    last = DrainStats()
    try:
        while not stop.is_set():
            last = await deliverer.drain(deadline=time.time() + interval * 5)
            try:
                await asyncio.wait_for(stop.wait(), interval)
            except TimeoutError:
                pass
        # a receiver that just timed out (as the batch ended) is left to the next run or
        # 'afc webhooks deliver': the run ends one timeout after its renders, not two; one
        # that failed fast (a 503, a refused connection) costs nothing to try once more
        # nor is one whose answers take longer than the pass has left (``bounded``): the
        # run ends within FINAL_DRAIN_S of the pass beside it, not a slow POST after that
        await deliverer.drain(
            deadline=time.time() + FINAL_DRAIN_S, failed=last.slow, wait_rest=True, bounded=True
        )
    finally:
        await deliverer.close()


def deliver(ledger_path: str, only: str | None = None) -> DrainStats:
    """``afc webhooks deliver``: drain every due delivery, alone (for cron); ``only``: that
    delivery alone (``replay``)."""
    ledger = Ledger(ledger_path, create=False)
    try:
        ledger.refuse_moved()  # its outbox was copied: the destination's runs send it

        async def main() -> DrainStats:
            deliverer = Deliverer(ledger)
            try:
                with ledger.grouped(asyncio.get_running_loop()):
                    stats = await deliverer.drain(only=only)
                if only is None:  # not posted here, nor by anyone until their claim ends
                    stats.held, stats.held_until = ledger.held_deliveries()
                    # nor those waiting out their backoff: posted once due
                    stats.not_due, stats.next_due_at = ledger.waiting_deliveries()
                return stats
            finally:
                await deliverer.close()

        return run_stoppable(main)
    finally:
        ledger.close()


T = TypeVar("T")


def run_stoppable(main: Callable[[], Awaitable[T]]) -> T:
    """``asyncio.run(main())`` with SIGINT, SIGTERM and SIGHUP cancelling it, then raising
    KeyboardInterrupt (exit 130 at the CLI's boundary, with what to run again).

    Not left to asyncio's own Ctrl-C handling, which it installs only when SIGINT has its
    default handler: a shell starts a background job (a script's ``afc webhooks deliver &``,
    ``nohup``) with SIGINT ignored, so a SIGTERM turned into a SIGINT did nothing, and a
    delivery held by its receiver went on until the POST's timeout (up to 120 s), past a cron
    job's ``timeout``. The handlers are plain ones, as the run loop's (run.Interruption): each
    signal is counted in the main thread and wakes the loop to cancel the main task; the
    previous handlers come back once it ends."""
    from afc_cli.errors import STOP_SIGNALS

    stopped = False

    async def stoppable() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()

        def on_signal(signum: int, frame: Any) -> None:
            nonlocal stopped
            stopped = True
            loop.call_soon_threadsafe(task.cancel)

        saved = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
        try:
            return await main()
        finally:
            for sig, handler in saved.items():
                signal.signal(sig, handler)

    try:
        return asyncio.run(stoppable())
    except asyncio.CancelledError:
        if stopped:
            raise KeyboardInterrupt from None
        raise


def listing(ledger_path: str, dead_only: bool) -> tuple[Iterator[dict[str, Any]], str | None]:
    """The deliveries (``afc webhooks list``), an iterator read from the ledger a chunk at a
    time as it is taken (``Ledger.delivery_chunks``: a row a job event, kept once delivered,
    grow with every batch), and where ``afc ledger copy`` moved the ledger's work, or None: a
    moved ledger's pending deliveries are sent by the destination's runs, never from it
    (``Ledger._NOT_MOVED``). The ledger is read, and the move known, before the first row."""
    ledger = Ledger(ledger_path, create=False, reading=True)
    try:
        moved = ledger.moved_to()
    except BaseException:
        ledger.close()
        raise
    return _deliveries_of(ledger, dead_only), moved["destination"] if moved else None


def _deliveries_of(ledger: Ledger, dead_only: bool) -> Iterator[dict[str, Any]]:
    try:
        for rows in ledger.delivery_chunks(dead_only):
            yield from rows
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


def replay_dead(ledger_path: str, batch: str | None = None) -> tuple[int, DrainStats]:
    """Every dead event (of ``batch``) re-queued with its exact stored envelope, then every
    due event delivered now, as 'afc webhooks deliver' does: how many were dead, and the
    delivery's figures (none when none was dead: nothing sent). A receiver down for longer
    than an event's tries (MAX_TRIES, about ten minutes of backoff) leaves every event of its
    outage dead, which a replay by id sent back one at a time."""
    ledger = Ledger(ledger_path, create=False)
    try:
        ledger.refuse_moved()
        ledger.require_batch(batch)
        # sent now, signed: refused first, nothing changed, without a secret they need
        secrets = ledger.dead_delivery_secrets(batch)
        scope = f" --batch {batch}" if batch is not None else ""
        require_secrets(secrets, f"afc webhooks replay --dead{scope}")
        count = ledger.requeue_dead_deliveries(batch)
    finally:
        ledger.close()
    return count, deliver(ledger_path) if count else DrainStats()


def replay(ledger_path: str, delivery_id: str) -> DrainStats:
    """Re-queue a dead, delivered or pending row (named by its id or a unique prefix of it) with its
    exact stored envelope (signed afresh, same webhook-id) and deliver it now, alone: the
    other due rows wait for 'afc webhooks deliver' or a run (a replay sent them all, and its
    exit code could be another receiver's). A replay also re-enables an endpoint a 410
    disabled."""
    ledger = Ledger(ledger_path, create=False)
    try:
        ledger.refuse_moved()  # before the requeue: its delivery (``deliver``) is refused there
        row = ledger.delivery(delivery_id) or _by_prefix(ledger, delivery_id)
        delivery_id = row["id"]
        # a replay is sent now, signed: without its secret it would only be queued, the
        # command saying nothing of why (exit 0, "1 skipped"). Refused first, nothing changed
        require_secrets({row["secret_env"]}, f"afc webhooks replay {delivery_id}")
        # a pending one too: a replay interrupted once its row was re-queued (Ctrl-C, a cron
        # timeout) said to run it again, which refused it as pending (exit 2)
        if not ledger.requeue_delivery(delivery_id):
            raise UsageError(
                f"delivery {delivery_id!r} is being posted by another afc process (or one "
                "killed while it posted it), whose lease on it has not run out: it goes out "
                "with afc webhooks deliver, at once if that process died on this host, else "
                "once its lease has run out (nothing was changed)"
            )
    finally:
        ledger.close()
    return deliver(ledger_path, only=delivery_id)
