"""The one attempt runner: every provider call of a job's chain, its retries and fallbacks.

Nothing under it retries on its own. What happens after a failed attempt depends on its error
class (docs/design.md, README "One job's pipeline"):

- ``auth``, ``invalid``, ``cancelled`` stop the whole chain: the job fails.
- ``rate_limited``, ``timeout``, ``unavailable``, ``server`` (and an attempt whose provider
  answered that it no longer has the request: outcome ``unknown``) back off and try the same
  model while it has attempts left.
- ``refusal`` uses the same model's remaining attempts first (some models refuse a prompt only
  sometimes), without waiting.
- ``window_expired`` never retries that model: the provider may have billed the whole window.

A model is left when its attempts run out or its window expired. The reasons for leaving are
``{"exhausted", <class>}`` after transient failures, ``{"refusal"}`` after refusals and
``{"window_expired"}``; the chain moves to the next model only if the entry's ``fallback_on``
names one of them (default: ``[exhausted]``). An exhausted chain fails with the last real cause.

The runner's state is the ledger's attempt rows, so a resumed job continues where it stopped:
attempt numbers, per-model counts and backoff all carry over.

``attempts`` counts the provider's answers. An attempt cut off by afc's own end (SIGKILL,
Ctrl-C, SIGTERM, a power cut, a takeover) is recorded with the class ``interrupted``: status
``unknown`` (possibly paid) when its request may have reached the provider, ``failed`` at a
known cost of 0 when it provably never left. Such attempts stay in the ledger and in every
cost figure, but ``counted`` leaves them out: they never use up a model's attempts and never
fail a job by themselves, and the next attempt after one starts without a backoff wait. (A job
whose runs keep dying mid-call is bounded separately: ``AFC_MAX_INTERRUPTS`` in pipeline.py.)
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

STOP_CHAIN = frozenset({"auth", "invalid", "cancelled"})
RETRY_SAME_MODEL = frozenset({"rate_limited", "timeout", "unavailable", "server", "unknown"})
INTERRUPTED = "interrupted"  # the class of an attempt cut off by afc's own end


def backoff_delay(
    failures: int,
    *,
    base: float,
    cap: float,
    retry_after: float | None = None,
    rand: Callable[[], float] = random.random,
) -> float:
    """Seconds to wait before the next try, after ``failures`` consecutive failures (>= 1).

    Exponential with full jitter, uniform in [0, min(cap, base * 2**(failures-1))]; a provider's
    Retry-After (or equivalent) is honoured as a floor over that draw, but never beyond ``cap``.
    A floor, never a shortcut: a gateway answering 429 or 503 with ``Retry-After: 0`` (or an
    HTTP date already past) had every try of a model spent within a second, where the backoff
    would have spread them; a Retry-After longer than the draw is waited in full. Pure: the
    random source is injected, so tests assert the maths without sleeping.

    Every retry in afc waits through this function, and none through the ``backoff`` package
    (no longer a dependency): its decorators sleep with ``asyncio.sleep`` / ``time.sleep``
    themselves, with no way to pass another sleep (litl/backoff issue #125), and its jitter
    draws from the global random module. The one in-process retry loop, the storage policy
    (``_storage`` in afc_cli/pipeline.py), must wait through the run's injectable
    ``RunContext.sleep`` so tests never sleep and an interrupted run stops waiting; webhook
    retries are not an in-process loop at all but a schedule kept in the ledger
    (``next_attempt_at``, afc_cli/webhooks.py) that outlives the process, like the attempt
    runner's.
    """
    if failures < 1:
        return 0.0
    ceiling = min(cap, base * (2 ** min(failures - 1, 62)))
    delay = rand() * ceiling
    if retry_after is not None and retry_after >= 0:
        delay = max(delay, min(float(retry_after), cap))
    return delay


def parse_retry_after(
    value: str | None, *, now: float | None = None, date: str | None = None
) -> float | None:
    """Seconds to wait from a Retry-After header: delay-seconds or an HTTP date.

    None when absent or unreadable; a date in the past means 0. A date is measured against
    ``date``, the same answer's ``Date`` header (both are the server's clock: RFC 9110
    10.2.3), where it has a readable one, else against this host's clock (``now``): on a
    host whose clock ran a minute ahead, every "come back in 30 s" read as a date already
    past, 0 s, and the next try went at once, with no backoff, using up the attempts (or a
    webhook's tries) in a burst the server had asked to be spared.
    """
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when is None:
            return None
        when = _gmt(when)
        current = time.time() if now is None else now
        sent = _http_date(date)
        if sent is not None:
            current = sent
        return max(0.0, when.timestamp() - current)
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        return None
    return max(0.0, seconds)


def _http_date(value: str | None) -> float | None:
    """A ``Date`` header's time, or None when absent or unreadable."""
    if not value:
        return None
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value.strip())
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return _gmt(when).timestamp()


def _gmt(when: Any) -> Any:
    """A parsed HTTP date, read as GMT where it names no zone: an HTTP date is always GMT, and
    its asctime form (``Sun Nov  6 08:49:37 1994``, which RFC 9110 5.6.7 says a recipient
    MUST accept) names none. Dropped as unreadable, a 429's ``Retry-After`` in that form was
    no wait at all; read by this host's local time, it was off by the host's time zone."""
    from datetime import UTC

    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


@dataclass(frozen=True)
class PastAttempt:
    chain_index: int
    status: str  # succeeded | failed | unknown
    error_class: str | None
    provider: str
    model: str
    http_status: int | None = None
    message: str | None = None
    retry_after: float | None = None

    @property
    def effective_class(self) -> str:
        return self.error_class or "unknown"

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> PastAttempt:
        return cls(
            chain_index=row["chain_index"],
            status=row["status"],
            error_class=row["error_class"],
            provider=row["provider"],
            model=row["model"],
            http_status=row["http_status"],
            message=row["error_message"],
            retry_after=row.get("retry_after_s"),
        )


def counted(rows: list[dict[str, Any]], base: int = 0) -> list[PastAttempt]:
    """The ended attempts that count toward a chain's ``attempts``: those numbered after
    ``base`` (the last ``afc retry``), failed or of unknown outcome, and not interrupted."""
    return [
        PastAttempt.from_row(r)
        for r in rows
        if r["number"] > base
        and r["status"] in ("failed", "unknown")
        and r["error_class"] != INTERRUPTED
    ]


def interrupted_last(rows: list[dict[str, Any]], base: int = 0) -> bool:
    """Whether the latest attempt since ``base`` was cut off by afc's own end."""
    recent = [r for r in rows if r["number"] > base]
    return bool(recent) and recent[-1]["error_class"] == INTERRUPTED


@dataclass(frozen=True)
class Try:
    """Make an attempt on chain entry ``chain_index`` after waiting ``delay`` seconds."""

    chain_index: int
    delay: float
    after: str | None  # the class that caused the wait, for the ledger and the user


@dataclass(frozen=True)
class GiveUp:
    """The chain is over: the job fails with the last real cause."""

    cause: PastAttempt
    reason: str


def next_try(
    chain: list[dict[str, Any]],
    history: list[PastAttempt],
    *,
    retry_after: float | None = None,
    rand: Callable[[], float] = random.random,
    after_interrupt: bool = False,
) -> Try | GiveUp:
    """Decide the next attempt from the chain and the counted attempts so far (oldest first).

    ``after_interrupt``: the latest attempt was cut off by afc's own end, so the next one starts
    at once (the interruption was no sign of a provider needing a rest)."""
    decision = _next_try(chain, history, retry_after=retry_after, rand=rand)
    if after_interrupt and isinstance(decision, Try) and decision.delay:
        return Try(decision.chain_index, 0.0, INTERRUPTED)
    return decision


def _next_try(
    chain: list[dict[str, Any]],
    history: list[PastAttempt],
    *,
    retry_after: float | None,
    rand: Callable[[], float],
) -> Try | GiveUp:
    if not history:
        return Try(0, 0.0, None)
    index = history[-1].chain_index
    on_model = [h for h in history if h.chain_index == index]
    last = history[-1]
    entry = chain[index]
    cls = last.effective_class
    used = len(on_model)

    if cls in STOP_CHAIN:
        return GiveUp(last, f"{cls} stops the chain")
    if cls == "window_expired":
        reasons = {"window_expired"}
    elif used >= entry["attempts"]:
        reasons = {"refusal"} if cls == "refusal" else {"exhausted", cls}
    elif cls == "refusal":
        return Try(index, 0.0, cls)
    else:
        failures = 0
        for h in reversed(on_model):
            if h.effective_class not in RETRY_SAME_MODEL:
                break
            failures += 1
        backoff = entry.get("backoff") or {}
        delay = backoff_delay(
            failures,
            base=backoff.get("base", 2.0),
            cap=backoff.get("cap", 60.0),
            retry_after=retry_after if retry_after is not None else last.retry_after,
            rand=rand,
        )
        return Try(index, delay, cls)

    allowed = reasons & set(entry.get("fallback_on") or [])
    if allowed and index + 1 < len(chain):
        return Try(index + 1, 0.0, cls)
    model = f"{entry['provider']}/{entry['model']}"
    if index + 1 >= len(chain):
        why = f"{model} used {used} of {entry['attempts']} attempts and no model follows it"
    else:
        why = (
            f"{model} used {used} of {entry['attempts']} attempts; fallback_on "
            f"{sorted(entry.get('fallback_on') or [])} does not allow {sorted(reasons)}"
        )
    return GiveUp(last, why)


def describe_cause(cause: PastAttempt) -> str:
    status = f" (HTTP {cause.http_status})" if cause.http_status else ""
    message = f": {cause.message}" if cause.message else ""
    return f"{cause.effective_class} from {cause.provider}/{cause.model}{status}{message}"
