"""Operator commands: cancel and retry jobs, and the queue figures cron alerts on."""

from __future__ import annotations

import contextlib
import getpass
import json
import operator
import os
import re
import socket
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from afc_cli.errors import UsageError, batch_key_hint, several_batches
from afc_cli.ledger import ACTIVE, Ledger
from afc_cli.ledger.core import batches_with, ended_needs, stall_point
from afc_cli.owner import owner_is_dead, sees_process

STAT_FIELDS = (
    "queued",
    "in_flight",
    "delayed",
    "dlq",
    "failed",
    "oldest_age_seconds",
    "blocked",
    "awaiting_review",
    "oldest_review_age_seconds",
    "process_gone",
    "stuck",
)
RETRYABLE = ("failed", "dead", "cancelled")
# A call started on another host can't be proved dead from here; after this long it has ended
# or hung (a synchronous call's read timeout is 300 s, afc_cli/providers/http.py), so a retry
# no longer waits for it. A chain entry's ``window_s`` longer than that read timeout makes the
# call's timeout, its answer's headers and then its body each allowed that long
# (``HttpProvider.call_timeout``): such a call is waited for twice its window and
# STALE_CALL_S more (``_call_lasts``).
STALE_CALL_S = 900.0
# Confirm(what, jobs) -> bool: asked before acting on more than one job selected by a filter
Confirm = Callable[[str, list[dict[str, Any]]], bool]
_OPS = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    "<": operator.lt,
}
_CONDITION = re.compile(r"^\s*([a-z_]+)\s*(>=|<=|==|!=|>|<)\s*(\d+)\s*$")
# the digits of a --fail-if threshold: a count of jobs or an age in seconds never has more.
# Python reads no integer of more than 4,300 digits, and one that long stopped the command as
# 'unexpected error ... (a bug in afc)', exit 1: the exit of a threshold crossed, to cron
MAX_THRESHOLD_DIGITS = 18


def _named(
    ledger: Ledger, ledger_path: str, keys: list[str], batch: str | None, verb: str
) -> list[dict]:
    """The jobs named by key (within ``batch``, which the caller checked, if given): one job a
    key. Every key must exist, and without ``batch`` name a job of one batch only (two films
    may both have a ``shot-001``: which one is meant is the person's to say, as ``afc show``
    and ``afc review`` ask), or nothing is done (exit 2): a typo never leaves half of a
    command's work done, and one key never acts on several batches' jobs unasked."""
    from afc_cli.ledger.postgres import display_url

    targets, problems = [], []
    where = f" in batch {batch!r}" if batch else ""
    for key in dict.fromkeys(keys):  # a key named twice is one job
        found = ledger.jobs_by_key(key, batch)
        if not found:
            # the ledger as every message names it: a PostgreSQL URL's password masked
            problems.append(
                f"no job with key {key!r}{where} in {display_url(ledger_path)}"
                + batch_key_hint(key)
            )
        elif len(found) > 1:
            batches = several_batches([repr(job["batch"]) for job in found])
            problems.append(f"key {key!r} is a key of several batches ({batches}): add --batch")
        else:
            targets.extend(found)
    if problems:
        raise UsageError(
            f"cannot {verb}, nothing was changed:\n" + "\n".join(f"  - {p}" for p in problems)
        )
    return targets


def _confirmed(confirm: Confirm | None, what: str, jobs: list[dict[str, Any]]) -> None:
    if len(jobs) > 1 and confirm is None:
        raise UsageError(
            f"{what} {len(jobs)} jobs: not confirmed (pass --yes to confirm without a "
            "terminal); nothing was changed"
        )
    if len(jobs) > 1 and not confirm(what, jobs):
        # a person on a terminal said no: not told to pass --yes "without a terminal"
        raise UsageError(f"{what} {len(jobs)} jobs: declined; nothing was changed")


# the ended jobs that wait for a person (``afc queue stats``' ``stuck``, ``afc resume`` exits 1
# for them): a person who gives one up cancels it by its key (``cancel``)
GIVEN_UP = ("failed", "dead")


def cancel(
    ledger_path: str,
    keys: list[str],
    batch: str | None,
    reason: str | None = None,
    confirm: Confirm | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Cancel jobs by key (within --batch if given) or every unfinished job of a batch.

    A cancelled job is final: its status is written through the first-terminal-wins update,
    so a worker busy with it notices at its next step (or when its wait ends) and stops; a
    result that arrives after the cancel changes no status but is still recorded as paid.
    Cancelling a whole batch of more than one job is confirmed first (``confirm``).

    A failed or dead-lettered job named by its key is dropped: a person gives it up, so it no
    longer waits for one (``afc resume`` exited 1, and a cron's ``--fail-if 'stuck>0'``
    alerted, at every run for ever, and ``afc retry`` then ``afc cancel`` left it queued
    between the two, for a worker to take and pay for). It is put back and cancelled in one
    transaction (events ``retried`` and ``cancelled``, its history kept); ``afc retry`` takes
    it back like any cancelled job.

    The blocked jobs that need a cancelled job fail (``DEPENDENCY_FAILED``), transitively;
    their count is the job's ``dependents_failed`` (absent when none), as a cancelled style
    frame can fail a whole batch behind it. ``afc retry`` of that job puts them back.
    """
    if not keys and batch is None:
        raise UsageError("name the jobs to cancel (KEY...) or a whole batch (--batch B)")
    ledger = Ledger(ledger_path, create=False)
    out: dict[str, list[dict[str, Any]]] = {
        "cancelled": [],
        "already_final": [],
        "not_found": [],
        "not_stopped_at_provider": [],
        "completed_at_provider": [],
        # requests of jobs cancelled before, whose cancel was cut off (Ctrl-C, SIGTERM, a
        # crash) before it asked the provider to stop them: asked now
        "stopped_at_provider": [],
    }
    try:
        ledger.refuse_moved()  # a change here would not reach the ledger its work moved to
        ledger.require_batch(batch)
        if keys:
            targets = _named(ledger, ledger_path, keys, batch, "cancel")
        else:
            # blocked jobs too: they are unfinished work that a run would pick up; a job
            # awaiting review is left to the review (reject it to end it)
            # those alone read, each whole (its request too), not every job of the batch
            targets = ledger.batch_jobs(batch, (*ACTIVE, "blocked"))
            _confirmed(confirm, "cancel", targets)
            # held first, in one transaction: no run or worker claims them while the cancel
            # goes through them one by one (``Ledger.hold_for_cancel``), freed if cut short
            held = [job["id"] for job in targets]
            ledger.hold_for_cancel(held, _hold_s(len(held)))
            stall_point("cancel_held")  # tests: held, none cancelled yet
        try:
            _cancel_each(ledger, targets, keys, reason, out, batch)
        finally:
            if not keys:
                with contextlib.suppress(Exception):  # its own error, if any, is the one said
                    ledger.release_held(held)
        if not keys:
            # left to their review, and said so: a batch whose only job left awaited review
            # was told 'no unfinished job to cancel', the job still listed by 'afc review
            # list' and counted by queue stats' oldest_review_age_seconds (a cron's alert)
            out["left_to_review"] = [
                {"key": job["key"], "batch": job["batch"]}
                for job in ledger.batch_jobs(batch, ("awaiting_review",))
            ]
    finally:
        ledger.close()
    return out


def _hold_s(jobs: int) -> float:
    """How long a batch cancel holds its jobs (``Ledger.hold_for_cancel``): a minute, and 20 ms
    a job beyond it (a cancel goes through 500 to 2,000 a second), so that another host's
    workers wait for it to end, while one killed frees them within that time."""
    return 60 + jobs * 0.02


def _cancel_each(
    ledger: Ledger,
    targets: list[dict[str, Any]],
    keys: list[str],
    reason: str | None,
    out: dict[str, list[dict[str, Any]]],
    batch: str | None,
) -> None:
    """Cancel the targets (``cancel``), fail the jobs that need them, then ask the providers
    to stop their requests."""
    why = reason or "cancelled with afc cancel"
    cancelled = []
    asks = []  # (job, cancelled before): whose requests the providers are asked to stop
    for job in targets:
        entry = {"key": job["key"], "batch": job["batch"]}
        # the jobs waiting for it fail once every target is cancelled: one of them may be
        # a target too, to be cancelled, not failed
        if keys and job["status"] in GIVEN_UP:
            # a person drops a failed or dead-lettered job named by its key: queued again
            # and cancelled in one transaction, so no run takes it between the two; the
            # jobs that failed because of it stay so (failed again, they were said to
            # fail with the cancel and their webhooks told of a second failure)
            entry["was"] = job["status"]
            with ledger.tx():
                dropped = ledger.retry(job, who(), dependents=False) and ledger.cancel(
                    ledger.job(job["id"]), why, dependents=False
                )
        else:
            dropped = ledger.cancel(job, why, dependents=False)
        if dropped:
            out["cancelled"].append(entry)
            cancelled.append((job["id"], entry))
            asks.append((job, False))
        else:
            entry["status"] = ledger.job(job["id"])["status"]
            out["already_final"].append(entry)
            if entry["status"] == "cancelled":
                asks.append((job, True))
                # cancelled by a cancel cut off before it failed the jobs that need it
                # (below): they were left 'blocked' behind a cancelled job
                cancelled.append((job["id"], entry))
    # the jobs that need them fail before any provider is asked (a cancel cut off while
    # it waits on one left them 'blocked' behind a cancelled job)
    for job_id, entry in cancelled:
        failed = ledger.fail_dependents(job_id, entry["batch"])
        if failed:  # said, as a rejection's are: a gate's cancel fails a batch behind it
            entry["dependents_failed"] = failed
    # Every target is cancelled before any provider is asked to stop a request: a
    # provider that takes a cancel and never answers (up to its read and pool timeouts,
    # 150 s on Replicate and fal) held the next target's cancel behind it, so a batch's
    # jobs stayed runnable, and a running afc went on paying for them, for hours.
    stops: list[_Stop] = []
    for job, before in asks:
        if before:
            stops += _ask_again(ledger, job, out)
        else:
            stops += _cancel_at_provider(ledger, job, out)
    if not keys:
        # the batch's cancelled jobs are no targets: a request an interrupted cancel of
        # the batch left rendering is asked to stop by the cancel run again, as told
        # (not one of this cancel's own: its answers are recorded below, all asked together)
        asking = {stop.request for stop in stops}
        for job in ledger.cancelled_with_requests(batch):
            stops += [s for s in _ask_again(ledger, job, out) if s.request not in asking]
    _stop_at_providers(ledger, stops, out)


def _asked(ledger: Ledger, job: dict[str, Any]) -> set[str]:
    """The requests of a job that a cancel asked its provider to stop (``_stop_at_providers``'s
    events), but not one whose latest ask the provider was not seen to take
    (``CANCEL_FAILED``: the key not set where that cancel ran, no answer, an error status):
    it may render on, billed, and a cancel run again (the key set now) asks it again.
    Counted as asked, the cancel run again asked nothing and said nothing of it."""
    import json

    from afc_cli.ledger.core import CANCEL_FAILED, PROVIDER_CANCELS

    latest: dict[str, str] = {}
    for event in ledger.events(job["id"]):
        if event["kind"] in PROVIDER_CANCELS:
            latest[json.loads(event["detail_json"] or "{}").get("request")] = event["kind"]
    return {request for request, kind in latest.items() if kind != CANCEL_FAILED}


def _ask_again(ledger: Ledger, job: dict[str, Any], out: dict[str, list]) -> list[_Stop]:
    """A job cancelled before: its requests that cancel never asked the provider to stop
    (no provider cancel event names them: that cancel was interrupted between its commit
    and its request to the provider) are asked now. The cancel said 'cancel those again',
    and the job is already cancelled, so without this a Replicate or fal render went on,
    billed, and its cost was never learned (a cancelled job's request is not polled
    again)."""
    return _cancel_at_provider(ledger, job, out, _asked(ledger, job), again=True)


@dataclass
class _Stop:
    """A request ``afc cancel`` asks its provider to stop (``_stop_at_providers``)."""

    job: dict[str, Any]
    attempt: dict[str, Any]
    provider: Any
    again: bool

    @property
    def request(self) -> str:
        return self.attempt["provider_request_id"]

    @property
    def named(self) -> dict[str, Any]:
        return _request_named(self.job, self.attempt)


def _request_named(job: dict[str, Any], attempt: dict[str, Any]) -> dict[str, Any]:
    """A request as 'afc cancel' names it (``--json`` and stderr): key, batch, provider,
    request."""
    return {
        "key": job["key"],
        "batch": job["batch"],
        "provider": attempt["provider"],
        "request": attempt["provider_request_id"],
    }


def _cancel_at_provider(
    ledger: Ledger,
    job: dict[str, Any],
    out: dict[str, list],
    skip: Collection[str] = (),
    *,
    again: bool = False,
) -> list[_Stop]:
    """A job rendering on a job-style provider (Replicate, fal): its requests to ask the
    provider to stop too, so the render stops costing money (``_stop_at_providers``).
    Adds to ``out`` at once a synchronous provider's paid render a stopped run left at its
    output URL (``completed_at_provider``: made and billed, nothing to stop). ``again``
    (``_ask_again``): a cancelled job's requests an earlier cancel did not ask;
    ``skip``: requests asked already."""
    from afc_cli.providers import PROVIDERS

    stops = []
    for attempt in ledger.attempts(job["id"]):
        provider = PROVIDERS.get(attempt["provider"])
        if (
            not again
            and attempt["status"] in ("started", "unknown")
            and attempt.get("answer_url")
            and provider is not None
        ):
            # a synchronous provider's paid render a stopped run left at its output URL:
            # made and billed, nothing to stop; 'afc retry' fetches it (Ledger.retry), however
            # old, while the provider serves it (``pipeline._resumable``)
            out["completed_at_provider"].append(_request_named(job, attempt))
        if (
            attempt["status"] in ("started", "unknown")
            and attempt["provider_request_id"]
            and provider is not None
            and provider.resumable
            and attempt["provider_request_id"] not in skip
        ):
            stops.append(_Stop(job, attempt, provider, again))
    return stops


# Requests 'afc cancel' asks to stop at once. Each renders, billed, until its provider stops
# it, and one at a time (a new connection each) the last of a batch's 500 was stopped
# minutes after the first, hours behind a provider slow to answer; more at once would meet
# the providers' rate limits (Replicate's 600 requests a minute), which refuse a cancel.
CANCELS_AT_ONCE = 8


def _stop_at_providers(ledger: Ledger, stops: list[_Stop], out: dict[str, list]) -> None:
    """Ask the providers to stop the requests ``stops``, ``CANCELS_AT_ONCE`` at a time
    through one client a provider, then record each answer, in the order they came: whatever
    a request reports later is still recorded. Written in the loop that asks, a record that
    waited for a SQLite ledger another process held (up to its busy timeout) held back every
    stop not yet asked, their requests rendering on, billed. Adds to ``out`` the requests the
    provider was not seen to stop (``not_stopped_at_provider``: its key not set here, no
    answer, an error status), each with why: the job is cancelled all the same, but the
    request may render on, billed, and the person who cancelled is told so rather than left
    to think it stopped; those the provider said had completed before the cancel came
    (``completed_at_provider``: paid for, 'afc retry' fetches the result by the request's
    id); and, of those asked again (``_ask_again``), those it stopped
    (``stopped_at_provider``). A request whose answer was recorded is not asked again by a
    later cancel (``_asked``); one whose answer a killed cancel did not record is."""
    import asyncio

    from afc_cli.ledger.core import CANCEL_FAILED, CANCEL_TOO_LATE
    from afc_cli.providers.base import COMPLETED, ENDED
    from afc_cli.secrets import scrub

    if not stops:
        return

    # what the person is told of each request, by its place in ``stops``: answers come in any
    # order, and the lists went out in that order (two cancels of one batch named its
    # requests in another order each time); in the batch's order, as one at a time was
    said: list[list[tuple[str, dict[str, Any]]]] = [[] for _ in stops]

    def record(stop: _Stop, why: str | None, usage: dict[str, Any] | None, told: list) -> None:
        job, attempt, named, request = stop.job, stop.attempt, stop.named, stop.request
        if why == COMPLETED:
            # It rendered, and was billed, before the cancel came: nothing was stopped.
            # An 'afc retry' polls it by its id and stores its result (Ledger.retry),
            # where a new request paid for the one output again.
            ledger.note(job, CANCEL_TOO_LATE, request=request, attempt=attempt["number"])
            told.append(("completed_at_provider", named))
            _price_completed(ledger, job, attempt, usage)
        elif why is None or why == ENDED:
            ledger.note(job, "provider_cancel_sent", request=request)
            if stop.again:
                told.append(("stopped_at_provider", named))
            # (ENDED: it had failed by itself before the cancel came: it renders no more, and
            # what it billed, a Replicate prediction's seconds, prices its attempt as a poll
            # would have; left unpriced, 'unknown outcome, possibly paid' for good: found by
            # outside audit 51b)
            _price_completed(ledger, job, attempt, usage)
        else:
            ledger.note(job, CANCEL_FAILED, request=request, why=why)
            told.append(("not_stopped_at_provider", {**named, "why": why}))

    # the answers as they came, recorded once every stop has been asked
    answers: list[tuple[_Stop, str | None, dict[str, Any] | None, list]] = []

    async def ask_all() -> None:
        room = asyncio.Semaphore(CANCELS_AT_ONCE)

        async def ask(stop: _Stop, told: list) -> None:
            attempt, usage = stop.attempt, None
            async with room:
                try:
                    why = await stop.provider.cancel_answer(stop.request, attempt["model"])
                except Exception as exc:  # noqa: BLE001 - the cancel in the ledger stands
                    why = scrub(str(exc)) or exc.__class__.__name__
                if why in (COMPLETED, ENDED):
                    # what it billed, as the provider reports it (one free GET); a read that
                    # fails leaves the attempt unpriced
                    params = json.loads(stop.job.get("request_json") or "{}").get("params")
                    with contextlib.suppress(Exception):
                        usage = await stop.provider.completed_usage(
                            stop.request, attempt["model"], params or {}
                        )
            answers.append((stop, why, usage, told))

        try:
            # each to its end, the first error (none expected: ``ask`` keeps the provider's)
            # raised once every answer is in
            ended = await asyncio.gather(
                *(ask(stop, told) for stop, told in zip(stops, said, strict=True)),
                return_exceptions=True,
            )
            for error in ended:
                if isinstance(error, BaseException):
                    raise error
        finally:
            for provider in {id(stop.provider): stop.provider for stop in stops}.values():
                with contextlib.suppress(Exception):
                    await provider.close()

    failed: Exception | None = None
    try:
        asyncio.run(ask_all())
    finally:
        # every answer in (also those in before a Ctrl-C), each to its end: one answer's
        # record that failed (a ledger refusing a write) is raised once the others are
        # recorded, which no later cancel asks again
        for stop, why, usage, told in answers:
            try:
                record(stop, why, usage, told)
            except Exception as exc:  # noqa: BLE001 - raised below
                failed = failed or exc
    if failed is not None:
        raise failed
    for told in said:
        for name, entry in told:
            out[name].append(entry)


def _price_completed(
    ledger: Ledger, job: dict[str, Any], attempt: dict[str, Any], usage: dict[str, Any] | None
) -> None:
    """The cost of a request a cancel found completed (rendered and billed), from the usage
    the provider reports for it (``Provider.completed_usage``: one free GET) priced by the
    batch's card, written on its attempt (``Ledger.price_left``). It was left unpriced, the
    costs report saying 'unknown outcome, possibly paid' for a Replicate render whose 3.2 s
    afc had been told, until a person retried the job (found by outside audit 50b). One whose
    usage could not be read (``usage`` None) stays as it was: unpriced, said so everywhere."""
    from afc_cli.costs import RateCards

    if not usage:
        return
    found = ledger.batch(job["batch"])
    cards = RateCards.from_text((found or {}).get("rates_json"))
    cost = cards.price(attempt["provider"], attempt["model"], usage)
    if cost is not None:
        ledger.price_left(job, attempt["number"], attempt["provider"], cost, usage)


def who() -> str:
    """Who made a decision, for the ledger's events: ``AFC_USER`` or the OS user, at this host."""
    return f"{os.environ.get('AFC_USER') or os_user()}@{socket.gethostname()}"


def os_user() -> str:
    """The OS user's name, or ``uid N`` where the uid has none (a bare container: no passwd
    entry, no USER or LOGNAME)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"


# how many succeeded jobs one refused retry looks for in storage (``_succeeded``)
LOOKED_FOR = 5


def _succeeded(ledger: Ledger, job: dict[str, Any], stores: dict[str, Any]) -> str:
    """Why a succeeded job is not retried. Its output is stored, the refusal said, even of one
    deleted since (by a person, a clean-up script, a bucket's lifecycle rule): a person told
    that looked no further. So the output is looked for: one stat on a folder, one HEAD in a
    bucket (the storage's own timeouts; a store that cannot be asked is said as before), for
    the first ``LOOKED_FOR`` succeeded jobs a retry names (they are named one by one; the
    rest are said as before). One gone is said so, with what can be done, since afc never
    renders a succeeded job again (replays and the probe trust the ledger, not storage).
    ``stores``: the storages opened by this refusal, by URL, and how many were looked at
    (``None``'s count). A storage that could not be asked (an error, or no answer within its
    timeouts) is not asked again by the same refusal: each HEAD into a hung bucket waited
    out the S3 client's timeouts (10 s to connect, 120 s to read), five of them up to eleven
    minutes of a silent prompt, to say what the first failure already said."""
    said = (
        "it succeeded: its output is stored, and afc never pays for it again (submit a changed "
        "request under a new key)"
    )
    from afc_cli import storage as storage_mod

    looked = stores.setdefault(None, 0)
    if looked >= LOOKED_FOR:
        return said
    stores[None] = looked + 1
    url = ledger.batch(job["batch"])["storage"]
    store = stores.get(url)
    if store is False:  # it failed this refusal once: said as before, not asked again
        return said
    try:
        if store is None:
            store = stores[url] = storage_mod.open(url)
        if store.head(job["output_key"]).exists:
            return said
        # its whole folder not there (a drive or share not mounted): every output of it
        # was said deleted or moved, each to be put back or paid for again under a new key
        root_gone = store.local and not store.root.is_dir()
    except Exception:  # what cannot be looked at is said as before
        stores[url] = False  # by URL: two batches in one hung bucket wait for it once
        return said
    if root_gone:
        return (
            f"it succeeded, and its output {store.describe(job['output_key'])} cannot be looked "
            f"at: the storage folder {store.root} does not exist (a drive or share not "
            "mounted?); afc never pays for a succeeded job again: mount it, or put the folder "
            "back"
        )
    gone = "deleted or moved" if store.local else "deleted"
    put = "put the file back" if store.local else "put the object back"
    return (
        f"it succeeded, but its output {store.describe(job['output_key'])} is no longer there "
        f"({gone} since it was stored and verified); afc never pays for a succeeded "
        f"job again: {put}, or submit the request under a new key to render it again"
    )


def retry(
    ledger_path: str,
    keys: list[str],
    batch: str | None,
    statuses: list[str],
    *,
    by: str | None = None,
    confirm: Confirm | None = None,
) -> dict[str, Any]:
    """Put failed, dead-lettered or cancelled jobs back to ``queued``: a person's decision.

    By key (``keys``, within ``batch`` if given), or by filter (``batch`` and ``statuses``, a
    subset of failed, dead, cancelled; more than one job selected is confirmed first). Every
    named job must be retryable, or nothing changes (exit 2): a succeeded job is never
    rendered again, and a queued or running one is already on its way. A job whose earlier
    run still has a call in flight (say it was cancelled mid-call) is refused until that call
    ends, so a retry never makes two executions of one job at once. The job keeps its key,
    request hash and history; the next ``afc resume`` (or cron) runs it, probing its output
    key first; budgets apply as to any run.

    A retried job's dependents that failed because of it (DEPENDENCY_FAILED) wait for it
    again: their count is its ``dependents_blocked``, and of them those that still need
    another job that ended badly (which the next run fails again) its ``dependents_failing``
    (each absent when none).
    """
    if keys and statuses:
        raise UsageError(
            "name jobs by KEY or select them with --failed/--dead/--cancelled, not both"
        )
    if not keys and not statuses:
        raise UsageError(
            "name the jobs to retry (KEY...) or select them: --batch B --failed, --dead or "
            "--cancelled"
        )
    if statuses and batch is None:
        raise UsageError("--failed, --dead and --cancelled select within one batch: add --batch B")
    ledger = Ledger(ledger_path, create=False)
    try:
        ledger.refuse_moved()
        ledger.require_batch(batch)
        if keys:
            targets = _named(ledger, ledger_path, keys, batch, "retry")
        else:
            targets = ledger.batch_jobs(batch, tuple(statuses))
        refused, already = [], []
        stores: dict[Any, Any] = {}  # ``_succeeded``'s
        for job in targets:
            if keys and _retried_unrun(ledger, job):
                already.append(job)  # an earlier retry's (one interrupted, say): left as it is
                continue
            if job["status"] not in RETRYABLE:
                why = {
                    "rejected": "a person rejected its output, which is final (submit a changed "
                    "request under a new key)",
                    "awaiting_review": "its output is stored and waits for a decision (afc "
                    "review approve or reject)",
                }.get(job["status"], f"it is {job['status']}: it runs (or will) without a retry")
                if job["status"] == "succeeded":  # looked for in storage only then
                    why = _succeeded(ledger, job, stores)
                refused.append(f"{job['batch']}/{job['key']}: {why}")
                continue
            now = ledger.clock()  # the clock attempts' starts are stamped on
            busy = [
                a for a in ledger.attempts(job["id"]) if _in_flight(a, now, _call_lasts(job, a))
            ]
            if busy:
                over = over_at(busy[-1], _call_lasts(job, busy[-1]))
                refused.append(
                    f"{job['batch']}/{job['key']}: attempt {busy[-1]['number']} of an earlier run "
                    f"({busy[-1]['owner']}) is still in flight; retry once it has ended{over}"
                )
        if refused:
            raise UsageError(
                "cannot retry, nothing was changed:\n" + "\n".join(f"  - {r}" for r in refused)
            )
        if not keys:
            _confirmed(confirm, "retry", targets)
        from afc_cli.run import lease_seconds
        from afc_cli.spool import Spool

        out: dict[str, Any] = {"retried": [], "unchanged": []}
        for job in already:
            out["unchanged"].append(
                {
                    "key": job["key"],
                    "batch": job["batch"],
                    "was": job["status"],
                    "status": job["status"],
                    "already_retried": True,
                }
            )
        targets = [job for job in targets if job not in already]
        decided_by = by or who()
        lease_s = lease_seconds()  # a job whose render waits in a host's spool: its lease there
        # A job's spool file in this host's spool (copied here, as SPOOL_MISSING asks): the
        # job stays with this host for a lease, so a run elsewhere does not pay for it again
        # (a shared ledger's hosts each spool on their own disk; not a SQLite ledger's), and
        # one dead-lettered SPOOL_MISSING goes back to its store step, holding its output key
        spool = Spool(ledger.spool_root())
        put_back = []  # (entry, the ids of the dependents it put back)
        for job in targets:
            entry = {"key": job["key"], "batch": job["batch"], "was": job["status"]}
            here = spool.path(job["id"]).is_file()
            back = ledger.retry(job, decided_by, lease_s, spooled_here=here)
            if back:
                # queued, or blocked: a job with needs waits for them again
                entry["status"] = ledger.job(job["id"])["status"]
                if len(back) > 1:  # the jobs that failed because of it wait for it again
                    entry["dependents_blocked"] = len(back) - 1
                    put_back.append((entry, back[1:]))
                if entry["status"] == "blocked":
                    # a need still ended badly (rejected, cancelled, failed, dead) fails it
                    # again at the next run's first look (DEPENDENCY_FAILED): said now, not
                    # found by a cron'd resume's exit 1
                    ended = ended_needs(ledger.needs_of(job["id"]))
                    if ended:
                        # a need that is also a reference image (a job input) is part of the
                        # job's request: naming another key there is a changed request (a new
                        # key), not a changed gate, which the advice for it must say
                        inputs = _input_keys(ledger.job(job["id"]))
                        entry["ended_needs"] = [
                            {"key": n["need_key"], "status": n["status"]}
                            | ({"input": True} if n["need_key"] in inputs else {})
                            for n in ended
                        ]
                refused = _refused_edit(ledger, job["id"])
                if refused is not None:
                    entry["refused_edit"] = refused
                out["retried"].append(entry)
            else:  # changed meanwhile (another retry won)
                entry["status"] = ledger.job(job["id"])["status"]
                out["unchanged"].append(entry)
        _dependents_failing(ledger, put_back)
        return out
    finally:
        ledger.close()


def _refused_edit(ledger: Ledger, job_id: str) -> dict[str, Any] | None:
    """The latest change of a job's request that a submit refused as a conflict (its
    ``conflict_refused`` event), or None. A retry renders the admitted request: a person who
    edited a failed job's prompt to fix it, was refused, and retried the key paid for the
    refused prompt again, nothing saying the retry was not of the edited one."""
    latest = None
    for event in ledger.events(job_id):
        if event["kind"] == "conflict_refused":
            latest = event
    if latest is None:
        return None
    detail = json.loads(latest["detail_json"] or "{}")
    return {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(latest["at"])),
        "changes": detail.get("changes") or [],
        "new_hash": detail.get("new_hash"),
    }


def _dependents_failing(ledger: Ledger, put_back: list[tuple[dict[str, Any], list[str]]]) -> None:
    """Of the dependents a retry put back, those that also need a job still ended badly
    once every retry of the command is made (a shot needing a style frame and a character
    frame, both cancelled, the style frame alone retried): counted as the job's
    ``dependents_failing``. The next run fails them again at once (DEPENDENCY_FAILED) and
    the jobs after them; said only 'wait for it again', a person expected them to run. Those
    after them put back too are counted with them: an edit needing a shot that still needs a
    cancelled character frame fails with the shot, and the retry said 1 of the 2 fails again."""
    ids = list(dict.fromkeys(job_id for _, back in put_back for job_id in back))
    needs = ledger.needs_of_many(ids)
    failing = {job_id for job_id in ids if ended_needs(needs[job_id])}
    grew = bool(failing)
    while grew:  # a pass a link (the walk's order puts most needs first: one or two passes)
        grew = False
        for job_id in ids:
            if job_id not in failing and any(n["need_id"] in failing for n in needs[job_id]):
                failing.add(job_id)
                grew = True
    for entry, back in put_back:
        count = sum(1 for job_id in back if job_id in failing)
        if count:
            entry["dependents_failing"] = count


def _input_keys(job: dict[str, Any] | None) -> set[str]:
    """The keys of the jobs whose outputs this job sends as reference images (its ``job``
    inputs, as admitted)."""
    try:
        items = json.loads((job or {}).get("inputs_json") or "[]")
    except ValueError:
        return set()
    return {item["job"] for item in items if isinstance(item, dict) and "job" in item}


def _retried_unrun(ledger: Ledger, job: dict[str, Any]) -> bool:
    """Whether a job named to ``retry`` is as an earlier retry left it: queued (or blocked
    on its needs) with that retry its last event, no run having taken it since. Each job's
    retry is its own transaction, so ``afc retry a b c`` interrupted after ``a`` and run again
    as it was refused everything, ``a`` being queued ("it runs without a retry"), and said
    nothing was changed (exit 2); now ``a`` is reported as already retried and the others are
    retried."""
    if job["status"] not in ("queued", "blocked"):
        return False
    events = ledger.events(job["id"])
    return bool(events) and events[-1]["kind"] == "retried"


def _call_lasts(job: dict[str, Any], attempt: dict[str, Any]) -> float:
    """How long after its start an attempt's call on another host may still be in flight:
    STALE_CALL_S, or, when its chain entry has a ``window_s``, twice that window (the read
    timeout of the answer's headers, then of its body) and STALE_CALL_S more. With 900 s
    alone, a call a window of 30 minutes let render was taken to be over after 15, and an
    'afc cancel' then 'afc retry' from another host had a worker pay for the job again while
    that call still rendered it."""
    try:
        chain = json.loads(job.get("request_json") or "{}").get("chain") or []
        window = chain[attempt["chain_index"]].get("window_s")
    except (ValueError, TypeError, LookupError, AttributeError):
        return STALE_CALL_S
    if not isinstance(window, (int, float)) or window <= 0:
        return STALE_CALL_S
    return STALE_CALL_S + 2 * float(window)


def over_at(attempt: dict[str, Any], lasts: float) -> str:
    """What a refusal to act under another host's call says of it: when it is taken to be
    over (UTC, on the ledger's clock, which its start was stamped on), if it has not ended
    before; a host that died mid-call never ends it. Nothing for a call of this host, whose
    process is looked at."""
    if sees_process(attempt["owner"]):
        return ""
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(attempt["started_at"] + lasts))
    return f" (another host's call: taken to be over at {at}, if it has not ended by then)"


def _in_flight(
    attempt: dict[str, Any], now: float | None = None, lasts: float = STALE_CALL_S
) -> bool:
    """Whether an attempt's call may still be running: started, by a live process of this
    host (AFC_HOST_ID, else its host name, and this machine's boot and pid namespace:
    ``owner.sees_process``), or elsewhere less than ``lasts`` ago (STALE_CALL_S, or longer for
    a call its chain entry's ``window_s`` lets run longer, ``_call_lasts``; another machine's or
    container's under this host id too: its process cannot be looked at from here).

    ``now`` is the ledger's ``clock()``, the clock the start was stamped on (the database
    server's on PostgreSQL): with this host's wall clock, a host 15 minutes ahead of the
    server took another host's call of a moment ago for a stale one, and a retry queued its
    job for a second paid render while the first still ran."""
    if attempt["status"] != "started" or owner_is_dead(attempt["owner"]):
        return False
    now = time.time() if now is None else now
    return sees_process(attempt["owner"]) or now - attempt["started_at"] < lasts


def queue_stats(ledger_path: str) -> tuple[dict[str, Any], str | None]:
    """The backlog's figures, and where ``afc ledger copy`` moved the ledger's work (its
    backlog is there: the figures here are of jobs no run takes), else None."""
    from afc_cli.listing import process_gone

    ledger = Ledger(ledger_path, create=False, reading=True)
    try:
        # the figures of one moment: a commit between the counts and the look at the held
        # jobs' leases (a run's claim, then its death) said in_flight 0 beside a job in flight
        ledger.read_one_moment()
        moved = ledger.moved_to()
        # each look-up below made in the batches that have such jobs alone, not in every
        # batch ever admitted (``Ledger.status_pairs``)
        pairs = ledger.status_pairs()
        stats = ledger.queue_stats(pairs=pairs)
        # a job whose afc process is gone (a killed run) is in flight or delayed no more: it
        # waits for the next run to take it over, as 'afc status' says (PROCESS_GONE)
        now = ledger.lease_clock()
        held = ledger.held_jobs(batches_with(pairs, "running", "waiting"))
        gone = [job["status"] for job in held if process_gone(job, now)]
        stats["in_flight"] -= gone.count("running")
        stats["delayed"] -= gone.count("waiting")
        stats["process_gone"] = len(gone)
        # the failed and dead jobs that wait for a person ('afc retry'), those 'afc resume'
        # exits 1 for: not one failed DEPENDENCY_FAILED only because a need was rejected or
        # cancelled, which a retry fails again at once (``run.follow_decisions``). An alert
        # on failed>0 (the cron wrapper's) fired at every run for ever after one rejection.
        stats["stuck"] = stats["failed"] + stats["dlq"]
        dependents = (
            ledger.failed_dependents(batches_with(pairs, "failed")) if stats["failed"] else []
        )
        if dependents:
            from afc_cli.run import follow_decisions

            stats["stuck"] -= len(follow_decisions(ledger, dependents))
        return stats, (moved["destination"] if moved else None)
    finally:
        ledger.close()


def failed_conditions(stats: dict[str, Any], expressions: list[str]) -> list[str]:
    """The ``--fail-if`` conditions (``dlq>0``, ``oldest_age_seconds>=3600``; comma-separated
    or repeated) that hold for these figures."""
    met = []
    for expression in expressions:
        if not expression.replace(",", "").strip():
            # an alert that can never fire, most likely an unset shell variable in cron
            raise UsageError(
                f"--fail-if {expression!r} names no condition; write FIELD OP NUMBER, e.g. dlq>0"
            )
        for part in expression.split(","):
            if not part.strip():
                continue
            match = _CONDITION.match(part)
            if not match or match.group(1) not in STAT_FIELDS:
                raise UsageError(
                    f"--fail-if {part.strip()!r}: write FIELD OP NUMBER, e.g. dlq>0, with FIELD "
                    f"one of {', '.join(STAT_FIELDS)} and OP one of > >= < <= == !="
                )
            field, op, number = match.groups()
            if len(number) > MAX_THRESHOLD_DIGITS:
                raise UsageError(
                    f"--fail-if {field}{op}{number[:20]}…: a number {len(number):,} digits "
                    f"long; {field} is a count or seconds, of at most "
                    f"{MAX_THRESHOLD_DIGITS} digits"
                )
            if _OPS[op](stats[field], int(number)):
                met.append(f"{field}={stats[field]} ({part.strip()})")
    return met
