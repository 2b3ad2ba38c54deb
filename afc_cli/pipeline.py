"""One job's pipeline, in order: probe, render, spool, store, verify, finish (docs/pipeline.md).

Each step is checkpointed in the ledger in the same transaction as its effect, and a resumed job
continues at its first incomplete step. Where each paid window opens and closes:

- probe: an output this job already stored ends the job with no provider call.
- render: an attempt row is committed (``started``) before every provider call. This call is
  the one paid window afc cannot close for a synchronous provider: if the process dies during
  it, the next run marks the attempt ``unknown`` (possibly paid, unpriced, kept) and tries again.
- spool: the bytes are made durable the moment they arrive; from here a crash costs an upload,
  never a render. A spool file that landed just before a crash is adopted, not re-rendered.
- store: create-only, so an object at the key that this job did not write is never overwritten.
  Storage errors retry the upload alone; a render is never repeated for them.
- verify: the read-back, not the write's success, decides.
- finish: the first terminal state wins; the spool file goes only after the job succeeded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import time
from collections import deque
from collections.abc import Awaitable, Callable, Collection
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from functools import partial
from pathlib import Path
from typing import Any

from afc_cli.attempts import (
    INTERRUPTED,
    GiveUp,
    backoff_delay,
    counted,
    describe_cause,
    interrupted_last,
    next_try,
)
from afc_cli.costs import (
    MAX_ESTIMATE,
    RateCards,
    format_usd,
    plural,
    to_micros,
    usage_amount,
    usd_problem,
)
from afc_cli.errors import (
    AnswerNotRead,
    LedgerWriteError,
    SpoolError,
    SpoolUnreadable,
    StorageDenied,
    StorageError,
)
from afc_cli.ledger import (
    SHARED_BUDGET,
    TERMINAL,
    BudgetExhausted,
    JobLost,
    Ledger,
    OutputBusy,
    OutputHeld,
    ProviderBusy,
)
from afc_cli.ledger.core import fail_point, stall_point
from afc_cli.listing import backoff_reason, output_wait_reason, slot_wait_reason
from afc_cli.owner import (
    awake_clock,
    host_id,
    host_lease_of,
    host_of,
    is_host_lease,
    is_spool_hold_of,
    owner_is_dead,
)
from afc_cli.progress import LEFT_ELSEWHERE
from afc_cli.providers import (
    PROVIDERS,
    AttemptRequest,
    ProviderError,
    images_requested,
    megapixels_requested,
)
from afc_cli.providers.base import GONE_PREFIX, NeverSent, OutputNotKept, RequestGone, no_look
from afc_cli.secrets import scrub, visible
from afc_cli.spool import DirSync, Output, Spilled, Spool, SpoolFile, damage, head_of, set_aside
from afc_cli.storage import ObjectExists, ObjectInfo, Storage
from afc_cli.storage.base import NOT_THERE, store_and_verify

STORE_TRIES = 3
STORE_BACKOFF_BASE_S = 0.5
STORE_BACKOFF_CAP_S = 10.0
MAX_STORE_REQUEUES = 5
# A worker tries a job whose storage work gave up again only after this pause, doubled at
# each failure (30, 60, 120, 240 s: the fifth try comes 7.5 minutes into an outage, not
# seconds), and within the host lease that keeps other hosts off it (at most 0.8 of it).
STORE_PAUSE_S = 30.0
MAX_INTERRUPTS = 5  # default of AFC_MAX_INTERRUPTS
# Spool writes at once (``RunContext.spool_writes``), and the least number of spool slots: a
# run gives one spool slot per render slot when --concurrency is more (run.run_jobs). A job
# keeps its render slot until it holds a spool slot (``run_job``), so at 500 wide 64 spool
# slots held back the next wave of provider calls behind the spool's writes (1,000 x 1 s
# OpenAI calls at 500 wide: 3.42-3.60 s); 500 slots each writing at once queued the next
# wave's probes behind 500 writes in the file helper (2.84-3.14 s). So a spool slot, taken
# before the render slot goes, bounds the paid bytes waiting in memory (at twice
# --concurrency), and of its holders at most SPOOL_SLOTS write at once (2.71-2.85 s).
SPOOL_SLOTS = 64


class PollAbandoned(Exception):
    """A stopping run stopped polling a submitted job-style request; the next run polls it."""


def _interrupts(rows: list[dict[str, Any]], base: int) -> int:
    """Attempts since the last retry that a run's end cut off, possibly paid: those left
    ``unknown``, and those that ended ``failed`` because a run's end lost their paid output
    (a Replicate or fal request a run left polling whose output the provider deleted before
    the next run came, an output URL a run left that is no longer served). Counted only while
    ``unknown``, such an attempt dropped out of the bound once the next run polled it to that
    end, and a job whose runs kept ending while its provider rendered paid for a new request
    at every run, without end. Not one never sent (``unsent``, a known 0)."""
    return sum(
        1
        for r in rows
        if r["number"] > base
        and r["error_class"] == INTERRUPTED
        and (
            r["status"] == "unknown"
            or (r["status"] == "failed" and r.get("cost_source") != "unsent")
        )
    )


class Slots:
    """The run's ``--concurrency`` slots: an ``asyncio.Semaphore`` (``async with``,
    ``acquire``, ``release``) whose waiters for a slot they gave back a moment ago
    (``acquire(first=True)``: ``RunContext.idle``, a job back from a backoff, a pause between
    rounds of fetching a paid output, a provider's limit) are served before the jobs not yet
    begun. A submit or a resume starts every job's task at once, each waiting for a slot in
    turn: with a plain semaphore a job that gave its slot back for a 0.05 s backoff, or for a
    pause while a rendered (and billed) output was out of reach, queued behind every job of
    the batch not yet begun. In a 10,000-job batch at 64 wide (bench/soak.py) 748 jobs were
    ``waiting`` on a backoff of at most 0.05 s, their last attempt ended 78 s before on
    average, 146 s at most, growing with the batch; a paid output's next fetch waited as long,
    and past the time its provider keeps it (fal 5 minutes, Replicate an hour) the job paid
    for a new render."""

    def __init__(self, value: int):
        self._value = value
        # waiters' futures; a cancelled one stays until ``release`` passes it over
        self._first: deque[asyncio.Future] = deque()
        self._rest: deque[asyncio.Future] = deque()

    def locked(self) -> bool:
        return self._value == 0

    async def acquire(self, first: bool = False) -> bool:
        # a free slot means no waiter is left (``release`` hands a slot to one directly)
        if self._value > 0:
            self._value -= 1
            return True
        future = asyncio.get_running_loop().create_future()
        (self._first if first else self._rest).append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # handed a slot, then cancelled before it ran: pass it on
            raise
        return True

    def release(self) -> None:
        for waiters in (self._first, self._rest):
            while waiters:
                future = waiters.popleft()
                if not future.done():
                    future.set_result(True)
                    return
        self._value += 1

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()


async def taken_back(acquire: Callable[[], Awaitable[Any]]) -> None:
    """Take back a slot given away for a wait, even when the task is cancelled meanwhile: the
    cancel is raised once the slot is held again. The holder gives it back at its end in any
    case (an ``async with``), so a slot not taken back was given back twice: one more call at
    once for the rest of the run (tests/test_audit54b_slot_after_window.py)."""
    taking = asyncio.ensure_future(acquire())
    cancelled = False
    while not taking.done():
        try:
            await asyncio.shield(taking)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError


class ProviderLimit:
    """A provider's call limits within one run: at most ``concurrency`` calls at once and at
    most ``per_minute`` call starts in any 60 seconds (sliding window). The same limits hold
    across every process of the ledger (other runs, ``afc worker`` on other hosts): the
    attempt row is refused (``ProviderBusy``) while they are reached, see
    ``Ledger.start_attempt``."""

    def __init__(
        self,
        concurrency: int | None = None,
        per_minute: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.slots = asyncio.Semaphore(concurrency) if concurrency else None
        self.concurrency = concurrency
        self.per_minute = per_minute
        self.clock = clock
        self.starts: deque[float] = deque()
        self.lock = asyncio.Lock()

    async def acquire(
        self, sleep: Callable[[float], Awaitable[None]], start: bool = True
    ) -> float | None:
        """A call slot, and, ``start``, a call start of the minute's (a request a run that
        ended left at the provider, polled, or its paid output fetched from its URL, starts
        none: as the ledger counts them, ``Ledger._check_limit``). Returns the start taken
        (None: none), for ``unstart``."""
        if self.slots is not None:
            await self.slots.acquire()
        if not self.per_minute or not start:
            return None
        try:
            async with self.lock:
                while True:
                    now = self.clock()
                    if self._minute_starts(now) < self.per_minute:
                        self.starts.append(now)
                        return now
                    await sleep(60.0 - (now - self.starts[0]))
        except BaseException:
            # cancelled while it waits for the minute (a stopping run, a window's end): the
            # slot taken above goes back, or it was kept for the rest of the run
            self.release()
            raise

    def _minute_starts(self, now: float) -> int:
        """The call starts of the last 60 seconds (the older ones dropped)."""
        while self.starts and now - self.starts[0] >= 60.0:
            self.starts.popleft()
        return len(self.starts)

    def unstart(self, at: float | None) -> None:
        """A start taken (``acquire``) for a call that was never made: no attempt row followed
        (the job cancelled while it waited for its slot, refused by the budget, its disk low,
        the run stopping). Counted, it held the run's next call back for up to a minute under
        a limit the provider had not been asked against, as the ledger's count (attempt rows)
        does not."""
        if at is not None:
            with contextlib.suppress(ValueError):
                self.starts.remove(at)

    def release(self) -> None:
        if self.slots is not None:
            self.slots.release()

    def full(self) -> str | None:
        """Which limit a call would wait for now (``RunContext.slot_wait``), else None."""
        if self.slots is not None and self.slots.locked():
            return f"{self.concurrency} at once"
        if self.per_minute and self._minute_starts(self.clock()) >= self.per_minute:
            return f"{self.per_minute} a minute"
        return None


class ProviderPace:
    """How many calls of one provider this run lets be in flight at once, learnt from its
    429s (``rate_limited``): none is held back until a call is answered 429; from then on the
    calls in flight are at most the ones the provider had in hand beside that call (at least
    one), and each call answered grows that by one over the calls in flight (one more call a
    round of calls), until the next 429 cuts it again.

    Each job backs off on its own 429 (``attempts.backoff_delay``), but the jobs behind it did
    not: a run at ``--concurrency 200`` against a provider taking 40 calls at once had its
    slots refilled by new jobs as fast as the 429s came back, every job spending its
    ``attempts`` on 429s within seconds. 3,000 jobs (fake provider, 1-3 s a render) ended
    2,624 failed ``rate_limited`` in 21 s, 8,300 429s sent for 376 renders. A wait here is
    idle time: the job's worker slot is given back (``RunContext.provider_slot``)."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.allowed: float | None = None  # None: no 429 met yet, no bound
        self.waiters: deque[asyncio.Future] = deque()

    def _room(self) -> bool:
        return self.allowed is None or self.in_flight < int(self.allowed)

    def take(self) -> bool:
        """Take a slot if one is free now (no wait)."""
        if self.waiters or not self._room():
            return False
        self.in_flight += 1
        return True

    async def acquire(self) -> None:
        if self.take():
            return
        future = asyncio.get_running_loop().create_future()
        self.waiters.append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # let in, then cancelled before it ran: pass it on
            raise

    def release(self) -> None:
        self.in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        while self.waiters and self._room():
            future = self.waiters.popleft()
            if not future.done():
                self.in_flight += 1
                future.set_result(None)

    def throttled(self) -> None:
        """A call holding one of these slots was answered 429."""
        beside = max(1, self.in_flight - 1)
        self.allowed = beside if self.allowed is None else max(1.0, min(self.allowed, beside))

    def answered(self) -> None:
        """A call holding one of these slots came back with the provider's answer."""
        if self.allowed is not None:
            self.allowed += 1 / self.allowed
            self._wake()


@dataclass
class SlotHeld:
    """A provider's slot held (``RunContext.provider_slot``): ``started`` once the job's
    attempt row is written, which keeps the start of the minute it took counted (the ledger
    counts that row too, sent or not); none written, the start is given back
    (``ProviderLimit.unstart``)."""

    started: bool = False


@dataclass
class RunContext:
    """What the steps share within one run of afc."""

    ledger: Ledger
    spool: Spool
    storages: dict[str, Storage]  # by batch name
    rates: dict[str, RateCards]  # by batch name
    slots: Slots
    store_slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(16))
    spool_slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(SPOOL_SLOTS))
    spool_writes: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(SPOOL_SLOTS))
    # a paid render spooled after its job ended elsewhere, to store under the storage slots
    # (``spool``, ``run_job``), by job id: (the job as it rendered, its spool file)
    late_results: dict[str, tuple[dict[str, Any], SpoolFile]] = field(default_factory=dict)
    # jobs whose paid render's bytes are in memory, between their provider call and their
    # spool step, by id: kept in the spool if the ledger breaks first (``keep_rendered``)
    rendered: dict[str, dict[str, Any]] = field(default_factory=dict)
    # renders spooled whose checkpoint the broken ledger refused, and the ones still in memory
    # when it broke (``keep_rendered``): stored as the run ends (``store_kept``)
    kept: list[tuple[dict[str, Any], SpoolFile]] = field(default_factory=list)
    # paid renders as the ledger broke whose bytes the spool's disk refused too (the ledger's
    # and the spool's one disk, full): neither kept nor recorded, named as the run stops
    unkept: list[str] = field(default_factory=list)
    # job-style submits the provider accepted (paid) whose request id the ledger could not
    # record, by job id: (job key, provider, request id, kept beside the spool). Polled on to
    # their end within the run's grace (their renders kept like any other); one still here
    # when the run ends is named in its stop message: the next run on this host polls it by
    # the id kept beside the spool (``Spool.note_request``), if that could be written.
    unrecorded: dict[str, tuple[str, str, str, bool]] = field(default_factory=dict)
    # the first ledger failure met where the job goes on (``unrecorded``), raised as the run
    # ends; ``ledger_broke`` stops the run as the first failed write of a job does (run.py
    # sets it to ``Interruption.stop_for``)
    ledger_error: LedgerWriteError | None = None
    ledger_broke: Callable[[LedgerWriteError], None] = lambda error: None
    # said once a run: a job taken over by another machine under this host's id
    # (``_shared_host_id``)
    host_id_said: bool = False
    lease_s: float = 300.0
    run_id: str | None = None
    cap_micros: int | None = None  # the run's budget; None: no budget
    budget_hit: bool = False
    # the dearest a model's answer has cost in this run, per image its request asked for, in
    # micro-USD, exact (a fraction), by model and rate card (``_priced_by``): the budget
    # reserves at least that (``_reservation``)
    dearest: dict[tuple, Fraction] = field(default_factory=dict)
    # the attempts (job id, provider, number) an earlier run left rendering at a job-style
    # provider that this run polls to their end (``reopen_attempt``): their cost counts in
    # this run's spend and budget, though this run started none of them (its summary says so)
    adopted: set[tuple[str, str, int]] = field(default_factory=set)
    # under a budget, the jobs whose requests an earlier run left that this run is to take
    # over, by job id, with what each will count in its spend (``count_adoptions``): counted
    # as spent until the job takes its request over or ends
    to_adopt: dict[str, int] = field(default_factory=dict)
    # no render starts while the spool's disk has less free than this (AFC_MIN_FREE_MB): its
    # bytes, and the ledger's record of them, must have somewhere to go
    min_free_bytes: int = 0
    # the largest output this run has spooled, or its batches had stored before it
    # (``Ledger.largest_output``): the room each render in flight is counted at (``_disk_low``)
    largest_output: int = 0
    limits: dict[str, ProviderLimit] = field(default_factory=dict)
    # each provider's calls in flight, bounded once it answers 429 (``ProviderPace``)
    paces: dict[str, ProviderPace] = field(default_factory=dict)
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    # progress for the person watching (afc_cli/output.py): report(job, event, detail, **info)
    report: Callable[..., None] = lambda job, event, detail, **info: None
    notice: Callable[[str], None] = lambda message: None  # a line above the progress
    # (batch, provider, model, what the bytes are, what the key names) said by ``_named_as``
    formats_said: set[tuple[str, ...]] = field(default_factory=set)
    url_lost_said: bool = False  # ``_url_lost_said``
    providers: dict[str, Any] = field(default_factory=lambda: PROVIDERS)
    # how blocking local file work runs: a thread, or the file helper process (offload.py);
    # ``quick``: how a local look (stat, small read) runs: None is inline, in the loop
    offload: Callable[..., Awaitable[Any]] = asyncio.to_thread
    quick: Callable[..., Awaitable[Any]] | None = None
    # the file storages found on the spool's own disk (``_storage_low``: held by ``_disk_low``)
    spool_disk: set[str] = field(default_factory=set)
    # how a storage's network calls (S3) and a job's input reads run: threads of their own
    # (run.py), never the loop's, which the ledger's commit sync before each paid call, the
    # spool writes of paid bytes and name lookups need; stalled uploads held them all
    network: Callable[..., Awaitable[Any]] = asyncio.to_thread
    dirs: DirSync = field(init=False)
    max_interrupts: int = MAX_INTERRUPTS
    # Graceful stop (run.py's Interruption sets ``stopping``): no new provider call starts;
    # ``protected`` jobs (from their attempt row to the end of their storage work) finish;
    # ``polling`` jobs (a job-style request submitted, its id committed) are left to the next
    # run, which polls them by id; ``fetching`` jobs (such a request's result ready: polled to
    # its end, billed, its output being fetched) are given a moment first (``result_ready``).
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    protected: set[str] = field(default_factory=set)
    storing: set[str] = field(default_factory=set)  # of those, the ones in their store steps
    polling: set[str] = field(default_factory=set)
    fetching: set[str] = field(default_factory=set)
    calls: dict[str, asyncio.Future] = field(default_factory=dict)
    # jobs whose room on the spool's disk ``_disk_low`` counted, until their call starts
    # (``call``), or a synchronous provider's (which has no ``call``) until it answers: the
    # attempt row's commit and the inputs' reads come between, and a wave's checks all ran
    # before its first call was counted, each finding the others' room free
    landing: set[str] = field(default_factory=set)
    abandoned: set[str] = field(default_factory=set)
    # jobs blocked on their needs when the run began, and the task of every job this run is
    # running: a blocked job waits for the tasks of its needs, then runs in the same run if
    # they succeeded. A job leaves both when its task ends (run.py ``_start``), which only
    # counts it (``ran``, ``finished``): a worker's loop runs as long as its claims find work.
    blocked: set[str] = field(default_factory=set)
    tasks: dict[str, asyncio.Future] = field(default_factory=dict)
    # (storage, output key) of the run's jobs that share one with another unfinished job of
    # the run's batches in that storage (run.py ``_note_outputs``), taken off as each job's
    # task ends, and the task holding each such key: two jobs of one key (two batches whose
    # template leaves out {batch}) run one after the other, so the second's probe finds the
    # first's object (``run_job``)
    output_of: dict[str, tuple[str, str]] = field(default_factory=dict)
    noted_batches: set[str] = field(default_factory=set)  # the batches ``output_of`` covers
    # the batches whose storage this run checked (run.py ``_open_batches``): a worker's claims
    # bring batches its loop had not met, admitted since it started or not runnable then
    checked: set[str] = field(default_factory=set)
    # starts the run's outbox (webhook deliveries) if it has none and there is something to
    # post: a batch a worker's refill brings may have a webhook (run.py ``_open_batches``)
    start_outbox: Callable[[str | None], None] | None = None
    holding: dict[tuple[str, str], asyncio.Future] = field(default_factory=dict)
    # a job whose key another job of this run holds with a paid render (``OutputHeld``), and
    # that job's task: the job looks again once that task has ended (``run_job``)
    held_here: dict[str, asyncio.Future] = field(default_factory=dict)
    # jobs with a file in the spool when the run began (run.py): a job the ledger admitted
    # anew (no attempt) looks there before paying (``render``, ``Spool.left_by``)
    left_in_spool: set[str] = field(default_factory=set)
    # batches whose store or verify gave up in this run: the next probe of each checks its
    # storage again, as before the run, before any render is paid (``_storage_broke``)
    storage_failed: set[str] = field(default_factory=set)
    # batches whose upload the store refused for want of permission, or as a request it does
    # not support (``StorageDenied``), or whose upload's tries were spent on the store's own
    # failing while none of its writes answered (``_storage_gave_up``: its reads may answer
    # all the while), and until when (the loop's clock): no job of one is rendered, since no
    # check sees it mended; a store of the batch that succeeds (a worker retrying a waiting
    # upload) ends it
    storage_denied: dict[str, tuple[StorageError, float]] = field(default_factory=dict)
    # (provider, model) -> the ``auth`` answer a call of this run met (a key refused, an
    # account out of money, a model its key may not use): no other job sends that model a
    # request in this run (``render``), each would meet the same answer
    refused: dict[tuple[str, str], str] = field(default_factory=dict)
    # the jobs of this run past their probe (rendering, spooling, storing), each with its
    # batch: the stores that may end a multipart refusal's hold of the batch (``_in_flight``)
    storing_for: dict[str, str] = field(default_factory=dict)
    # per batch, set when a store of it succeeds (``store``); and the jobs a multipart
    # refusal holds, each with what ends its wait in this run (``_until_a_store``, ``run_job``)
    stored_ok: dict[str, asyncio.Future] = field(default_factory=dict)
    refusal_held: dict[str, asyncio.Future] = field(default_factory=dict)
    # a job that waits in this run (``refusal_held``, ``held_here``), told 'waiting' but not
    # yet 'ended': told ended by ``run_job`` once it goes no further in this run
    told_waiting: dict[str, dict[str, Any]] = field(default_factory=dict)
    # batches whose storage failed in this run (``_Outage``): their probes wait for one look
    storage_down: dict[str, _Outage] = field(default_factory=dict)
    # per storage (``id``), when a call of it last succeeded (``_storage``): a store that
    # answers some calls is not down, only failing some (``_storage_gave_up``)
    answered: dict[int, float] = field(default_factory=dict)
    # per storage (``id``), when a write of it last answered (an upload taken, or its key
    # found taken, ``ObjectExists``): a store whose reads answer and whose writes all fail
    # is not failing some calls, it takes no output (``_storage_gave_up``)
    wrote: dict[int, float] = field(default_factory=dict)
    # per batch, the jobs of this run resting at their store step after their storage failed
    # in an earlier run (``note_stores_first``): the batch's probes wait until one of their
    # stores has ended in this run (``_stores_first``), set in ``first_store`` as one does
    stores_first: dict[str, set[str]] = field(default_factory=dict)
    # the stored outputs this run's jobs send as reference images, read once (``_read_inputs``)
    shared_inputs: Any = None
    first_store: dict[str, asyncio.Future] = field(default_factory=dict)
    ran: int = 0  # jobs' tasks started in this run, less those another process held
    finished: int = 0  # of those, the ones that ended with their job in a terminal state
    ended_badly: int = 0  # of those, the ones that ended failed, dead or cancelled
    cancelled: int = 0  # of those, the cancelled ones (a worker's line says them apart)
    # jobs this run held whose lease another process took over and which that process ended
    # (this one stalled past its lease): said, but not counted as this run's (``finished``)
    ended_elsewhere: set[str] = field(default_factory=set)
    # jobs whose claim found them held by another afc process (or ended by it): a submit or
    # resume looks at them again at its end (``run._take_released``)
    left_elsewhere: set[str] = field(default_factory=set)
    # jobs whose task claimed them in this run (``_run_job``): one a stop cancels before its
    # claim is not counted in ``ran`` (``run._start``)
    claimed_here: set[str] = field(default_factory=set)
    # jobs the budget refused that wait for this run's calls in flight (``_may_make_room``):
    # never waited for by another such job
    settling: set[str] = field(default_factory=set)
    # jobs resting between attempts (a backoff, this run's per-minute limit of a provider),
    # each with what ends its rest early (``rest``, ``wake_lost``)
    resting: dict[str, asyncio.Future] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.dirs = DirSync(self.offload)

    async def rest(self, job_id: str, seconds: float) -> None:
        """Sleep ``seconds`` between a job's attempts, unless the run's periodic look
        (``wake_lost``) finds the job no longer this run's first: then JobLost. A job a person
        cancelled in its backoff (up to 60 s) or while it waited for the minute of a
        ``per_minute`` limit slept the wait out, and a one-shot 'afc submit' whose last job it
        was kept the person waiting for its prompt that long, for nothing (the next attempt
        was refused, at no cost)."""
        woken = self.resting[job_id] = asyncio.get_running_loop().create_future()
        sleeping = asyncio.ensure_future(self.sleep(seconds))
        try:
            await asyncio.wait({sleeping, woken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeping.cancel()
            if self.resting.get(job_id) is woken:
                del self.resting[job_id]
        if woken.done():
            raise JobLost(job_id)

    def wake_lost(self) -> None:
        """Wake the resting jobs (``rest``) the ledger says this run no longer holds (cancelled,
        taken over): one read of them all, which the run's lease renewal task makes every few
        seconds while any job rests (run.py ``_renew``), not one a job."""
        if not self.resting:
            return
        for job_id in self.ledger.not_held(list(self.resting)):
            woken = self.resting.get(job_id)
            if woken is not None and not woken.done():
                woken.set_result(None)

    async def call(self, job_id: str, awaitable: Awaitable[Any]) -> Any:
        """Await a provider call as a task of its own, so that a stopping run can stop
        polling it (``abandon_poll``) without cancelling the job: then PollAbandoned."""
        task = asyncio.ensure_future(awaitable)
        self.calls[job_id] = task
        self.landing.discard(job_id)  # counted among the calls from here
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if job_id in self.abandoned and current is not None and not current.cancelling():
                raise PollAbandoned(job_id) from None
            raise
        finally:
            self.calls.pop(job_id, None)
            self.polling.discard(job_id)
            self.fetching.discard(job_id)
            self.abandoned.discard(job_id)

    def result_ready(self, job_id: str) -> None:
        """A polled request's result is ready (``AttemptRequest.on_ready``): rendered and
        billed, its output about to be fetched. A stop no longer leaves it at once
        (``polling``) but waits for the fetch a moment (run.py, ``Interruption.drain``:
        ``FETCH_WAIT_S``), then leaves it to the next run as before. Left at once, the next
        run polled it by id after the provider had deleted the result (fal keeps one of 10 KB
        or more six minutes; a cron'd run comes back hours later), and paid for a new render
        of an output that was ready to fetch when the run stopped."""
        if job_id in self.polling and job_id not in self.abandoned:
            self.polling.discard(job_id)
            self.fetching.add(job_id)

    def abandon_poll(self, job_id: str) -> None:
        """Stop polling a submitted job-style request (its id is committed)."""
        task = self.calls.get(job_id)
        if task is not None and not task.done():
            self.abandoned.add(job_id)
            task.cancel()

    @asynccontextmanager
    async def provider_slot(self, name: str, job_id: str, start: bool = True):
        """Hold one of a provider's call slots (``limits: {name: {concurrency, per_minute}}``,
        and its ``ProviderPace``) for the length of an attempt; waiting for it is idle time,
        not work. ``start``: the attempt starts a call (not one a run that ended left, taken
        over: ``ProviderLimit.acquire``). A wait for the minute is job ``job_id``'s rest
        (``rest``): cancelled meanwhile, the job leaves it (JobLost)."""
        limit = self.limits.get(name)
        pace = self.pace(name)
        slot = SlotHeld()
        if limit is None and pace.take():
            # nothing to wait for: the job keeps its worker slot, as before any 429
            try:
                yield slot
            finally:
                pace.release()
            return
        held: list[Callable[[], None]] = []  # what to give back, once taken
        try:
            async with self.idle():
                # the pace first: a ``per_minute`` start is counted when taken, so taken
                # last, just before the call, not before a wait for the pace
                await pace.acquire()
                held.append(pace.release)
                if limit is not None:
                    taken = await limit.acquire(partial(self.rest, job_id), start)
                    held.append(limit.release)
                    # the minute's start goes back unless an attempt row used it
                    held.append(lambda: slot.started or limit.unstart(taken))
        except BaseException:
            # cancelled out of the wait, or as the worker slot is taken back after it
            # (``idle``): what it took goes back, or it was kept for the rest of the run
            for release in held:
                release()
            raise
        try:
            yield slot
        finally:
            for release in held:
                release()

    def slot_wait(self, name: str) -> str | None:
        """Why a call of provider ``name`` would wait for its slot now (``provider_slot``: its
        pace after a 429, the manifest's ``limits``), said as a job's waiting reason; None
        when one is free."""
        pace = self.paces.get(name)
        if pace is not None and (pace.waiters or not pace._room()):
            return slot_wait_reason(
                name,
                f"after its 429s (rate_limited) this run keeps at most {int(pace.allowed or 1)} "
                "of its calls in flight",
            )
        limit = self.limits.get(name)
        full = limit.full() if limit is not None else None
        return slot_wait_reason(name, f"its limits allow {full}") if full is not None else None

    def pace(self, name: str) -> ProviderPace:
        """The run's ``ProviderPace`` of a provider."""
        pace = self.paces.get(name)
        if pace is None:
            pace = self.paces[name] = ProviderPace()
        return pace

    @asynccontextmanager
    async def idle(self):
        """Give the worker slot back while a job only waits (backoff), and take it again,
        before the jobs not yet begun (``Slots``).

        The slot is taken again even when the job is cancelled while it waits for one (its
        attempt's window ended, a stop): the job's ``async with ctx.slots`` gives one back
        at its end, and a window's end goes on to the next attempt. Cancelled out of that
        wait, a job whose window ended during a pause between fetches of its paid output
        went on to its next model without a slot, paid beside the call that had it (two
        calls under --concurrency 1), and gave back a slot it never held: one more for the
        rest of the run (tests/test_audit54b_slot_after_window.py)."""
        self.slots.release()
        try:
            yield
        finally:
            await taken_back(lambda: self.slots.acquire(first=True))


INLINE_READ_BYTES = 1 << 20
# Outputs up to this size are spooled by the file helper (the bytes cross its pipe); larger
# ones (videos) are written from a thread here, so a big output is never copied into a pipe.
OFFLOAD_SPOOL_BYTES = 4 << 20


async def _io(ctx: RunContext, storage: Storage, fn, *args, inline: bool = True):
    """Run a storage call. Local ``inline`` calls (stats, small reads) where ``ctx.quick``
    says (the helper's quick lane, else in the loop), other local file work (fsyncs, writes)
    where ``ctx.offload`` says, network calls in a thread."""
    if not storage.local:
        return await ctx.network(fn, *args)
    if not inline:
        return await ctx.offload(fn, *args)
    return fn(*args) if ctx.quick is None else await ctx.quick(fn, *args)


def crash_point(name: str, before: Callable[[], None] | None = None) -> None:
    """Die here, as SIGKILL would, when a crash test arms this point (AFC_CRASH_POINT=name).

    Timed SIGKILLs cover crashes anywhere; named points pin the narrow windows between a side
    effect and its checkpoint, which a timer rarely hits.
    """
    if os.environ.get("AFC_CRASH_POINT") == name:
        if before is not None:
            before()  # e.g. commit first, to die right after a committed change
        os.kill(os.getpid(), signal.SIGKILL)


# A job whose paid request leaves more than this after its attempt row was written (a process
# frozen, starved or asleep in between) is checked to be still this run's before it is sent
# (``_last_look``): another host may have taken it over meanwhile, and would be paying for it
# too.
LEASE_RECHECK_S = 1.0


def _awake_stamp() -> tuple[float, float]:
    """Now, for ``_awake_since``: ``awake_clock`` and the wall clock."""
    return awake_clock(), time.time()


def _awake_since(stamp: tuple[float, float]) -> float:
    """Seconds since ``stamp`` (``_awake_stamp``), counting a time the host slept: the longer
    of the two clocks' measures. ``time.monotonic()`` stands still while a host is suspended
    (a laptop's lid closed), so a process suspended between its attempt row and its request
    measured a quick commit on it when it woke, and sent a request another host had paid for
    meanwhile. The wall clock moves on in a suspend (and in a paused VM once NTP corrects it);
    a step of it forward costs one needless look at the job, never a request."""
    boot, wall = _awake_stamp()
    return max(boot - stamp[0], wall - stamp[1])


# the longest a job waits between looks at an output key another job is rendering
OUTPUT_POLL_MAX_S = 5.0
# how long a job the shared budget refused waits (jittered) before it asks again, while the
# budget's other workers have calls in flight that would make room were they free
BUDGET_LOOK_S = 2.0
# how long a worker's rounds leave a job alone whose output key another job holds with a
# paid render no run is working on (``OutputHeld``): that job's batch must run first
OUTPUT_HELD_PAUSE_S = 30.0
# how long a worker's rounds leave a job alone whose model refused a request of the run for
# its key, account or access (``render``): each round would send one refused request again
REFUSED_PAUSE_S = 300.0


async def _start_attempt(
    ctx: RunContext,
    job: dict[str, Any],
    chain_index: int,
    entry: dict[str, Any],
    wait: float | None,
    rates: Any,
    params: dict[str, Any],
) -> int | None:
    """``Ledger.start_attempt``, waiting (without a worker slot) while the provider's limits
    are reached across the ledger's other processes (a jittered wait between tries), and
    while another job renders this job's output key (``OutputBusy``: the job rests
    ``waiting``, saying for which job, and looks again less and less often, up to every
    ``OUTPUT_POLL_MAX_S``). Returns None when the job is no longer ours (JobLost when the
    run's look finds so during a wait for the limits, ``RunContext.rest``); raises _Stopped when
    the run began stopping while it waited (nothing was started)."""
    limit = ctx.limits.get(entry["provider"])
    shared = (limit.concurrency, limit.per_minute) if limit is not None else None
    key_waits = 0
    while True:
        try:
            return ctx.ledger.start_attempt(
                job,
                chain_index,
                entry["provider"],
                entry["model"],
                wait,
                durable=entry["provider"] != "local",
                run_id=ctx.run_id,
                reserve_micros=_reservation(ctx, entry, rates, params),
                cap_micros=ctx.cap_micros,
                limit=shared,
                pending_micros=sum(ctx.to_adopt.values()),
            )
        except ProviderBusy as busy:
            ctx.report(job, "waiting", busy.reason, reason="provider limit")
            why = slot_wait_reason(entry["provider"], busy.reason)
            if job["status"] == "waiting" and job.get("waiting_reason") != why:
                # resting 'waiting' (its backoff over): the reason it waits for now, as for
                # this run's own limits (``RunContext.slot_wait``), written once a reason
                ctx.ledger.set_waiting(job, why)
            # Waiting on the limit is no call: a stopping run cancels this wait (up to 90 s
            # for a full minute), not counts the job as in a call, waits out its grace for
            # it and says it abandoned a call possibly paid (as for OutputBusy, below)
            ctx.protected.discard(job["id"])
            async with ctx.idle():
                # up to 90 s for another process's minute: a rest, which the run's look
                # ends when the job is cancelled meanwhile (JobLost), not its end alone
                await ctx.rest(job["id"], busy.retry_after * (0.5 + random.random()))
            ctx.protected.add(job["id"])
            if ctx.stopping.is_set():
                raise _Stopped from None
            # cancelled (or taken over) while it waited, as for OutputBusy below: the limit's
            # refusal comes before the attempt's own check of the job, so a cancelled job
            # waited, and held its run open, until another process's call ended (a video's:
            # many minutes), the person's 'afc submit' going on for a job they had ended
            if _ended_elsewhere(ctx, job) is not None:
                return None
        except OutputBusy as busy:
            if busy.key is None:  # another process was checking this key: at once again
                async with ctx.idle():
                    await ctx.sleep(busy.retry_after * (0.5 + random.random()))
                if ctx.stopping.is_set():
                    raise _Stopped from None
                continue
            if not key_waits:
                why = output_wait_reason(job["output_key"], busy.key, busy.batch)
                ctx.ledger.set_waiting(job, why)
                ctx.report(job, "waiting", why, reason="output key")
            poll = min(busy.retry_after * 2**key_waits, OUTPUT_POLL_MAX_S)
            key_waits += 1
            # Resting waiting is no call: a stopping run cancels this wait (as a backoff's),
            # instead of counting the job as in a call and letting it sleep out a look's pause
            ctx.protected.discard(job["id"])
            # nor does it hold a call slot of its provider's limits (``provider_slot``): the
            # run's other jobs of that provider, whose keys nobody renders, go on meanwhile
            slots = limit.slots if limit is not None else None
            if slots is not None:
                slots.release()
            try:
                async with ctx.idle():
                    await ctx.sleep(poll * (0.5 + random.random()))
            finally:
                if slots is not None:
                    # through a cancel too: ``provider_slot`` gives it back at the attempt's
                    # end, and one given back unheld was one more call of the provider at once
                    await taken_back(slots.acquire)
            ctx.protected.add(job["id"])
            if ctx.stopping.is_set():
                raise _Stopped from None
            # cancelled (or taken over) while it waited: the refusal comes before the attempt's
            # own check of the job, so without this look it waited out the other job's render
            if _ended_elsewhere(ctx, job) is not None:
                return None


def _may_make_room(
    ctx: RunContext, job: dict[str, Any], exc: BudgetExhausted
) -> tuple[set[asyncio.Future], float | None] | None:
    """Of a job the budget refused an attempt: the tasks of this run's calls in flight whose
    reservations, were they to come back free (a 429, a refusal, a failure are not billed),
    would make room for its estimate, and the pause after which it asks again when a shared
    budget's other workers' calls would (None: none); None when no call could make room.
    Stopped at once, a run whose first wave of calls came back free ended 'stopped by the
    budget' having spent nothing, hundreds of its jobs never tried; it waits for those calls
    instead, and stops once the room they leave (none, or too little) does not fit."""
    # the requests this run is to take over count as its calls in flight (``to_adopt``), as
    # long as their tasks run; not one of an output key another job of this run shares
    # (``run_job``'s hold), whose task may wait for a job that waits here: a new job of another
    # batch with the request's key, listed first, held the key while it waited for that task,
    # which waited for the key ('afc resume --max-spend' hung for ever)
    adopting = {
        i: micros
        for i, micros in ctx.to_adopt.items()
        if i not in ctx.output_of and (task := ctx.tasks.get(i)) is not None and not task.done()
    }
    calls = (ctx.protected | adopting.keys()) - ctx.settling - {job["id"]}
    tasks = {task for i in calls if (task := ctx.tasks.get(i)) is not None and not task.done()}
    held = ctx.ledger.reserved_in_flight(ctx.run_id, ctx.ledger.owner) if tasks else 0
    held += sum(micros for i, micros in adopting.items() if i != job["id"])
    if held and exc.spent - held + exc.estimate <= exc.cap:
        ctx.settling.add(job["id"])
        return tasks, None
    if (ctx.run_id or "").startswith(SHARED_BUDGET):
        # A shared budget's other workers' calls in flight reserve it too: a worker whose
        # first job met a cap its sibling's first wave held stopped, exit 4 (a service
        # not restarted), told the budget was spent before it started, and the calls came
        # back free. Where they would make room, it looks again after a pause (their ends
        # are in another process), and stops once the budget's known spend leaves none.
        # (and the requests they hold to take over, counted as spent: ``adopting_elsewhere``)
        others = ctx.ledger.reserved_elsewhere(ctx.run_id, ctx.ledger.owner)
        others += ctx.ledger.adopting_elsewhere(ctx.run_id, ctx.ledger.owner)
        if others and exc.spent - held - others + exc.estimate <= exc.cap:
            ctx.settling.add(job["id"])
            return tasks, BUDGET_LOOK_S * (0.5 + random.random())
    return None


async def _await_settling(
    ctx: RunContext,
    job: dict[str, Any],
    settling: tuple[set[asyncio.Future], float | None],
) -> None:
    """Wait, holding no slot, until one of the calls' tasks ``_may_make_room`` named has
    ended, its pause is over, or the run stops."""
    tasks, pause_s = settling
    own = {asyncio.ensure_future(ctx.stopping.wait())}  # never a job's task: those run on
    if pause_s is not None:
        own.add(asyncio.ensure_future(ctx.sleep(pause_s)))
    try:
        async with ctx.idle():
            await asyncio.wait({*tasks, *own}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waited in own:
            waited.cancel()
        ctx.settling.discard(job["id"])


def _wait_for_holder(ctx: RunContext, job: dict[str, Any], held: OutputHeld) -> None:
    """Another job of this output key holds a paid render of it that no run is working on
    (``Ledger._check_output``): rendered here too, one of the two would be thrown away at its
    store (OUTPUT_KEY_CONFLICT), paid for nothing. So this job pays for nothing and rests
    ``waiting``, saying which job holds the key and what stores its render; its run leaves it
    (exit 1), and a worker's rounds leave it alone for ``OUTPUT_HELD_PAUSE_S``. Once that job
    has stored its render, this job's next run finds the object (OUTPUT_KEY_CONFLICT, at no
    cost); once it has ended without (cancelled, its render lost), this job renders.

    A holder dead-lettered with its render spooled waits for a person (``OutputHeld.final``):
    this job ends ``OUTPUT_KEY_CONFLICT`` at once, paid nothing, rather than wait with no run
    to end the wait (a worker's ``--until-idle`` never went idle)."""
    why = held.said(job["output_key"])
    if held.final:
        ctx.ledger.finish(
            job,
            "failed",
            step="render",
            outcome="conflict",
            error_code="OUTPUT_KEY_CONFLICT",
            error_class="invalid",
            error_message=f"{why}. Nothing was paid for this job (to "
            f"render it instead: retry that job, cancel it, then 'afc retry {job['key']} --batch "
            f"{job['batch']}')",
        )
        return
    why += "; this job renders nothing until that job has ended"
    ctx.ledger.set_waiting(job, why)
    first = ctx.tasks.get(held.job_id or "")
    if first is not None and not first.done():
        # that job runs in this run: this job looks again once its task has ended
        # (``run_job``), rather than be left waiting on a job this run then finished
        ctx.held_here[job["id"]] = first
    else:
        ctx.ledger.pause_claims(job["id"], OUTPUT_HELD_PAUSE_S)
    ctx.report(job, "waiting", why, reason="output key held")


def count_adoptions(ctx: RunContext, job_ids: list[str]) -> None:
    """Under a budget, count the requests of ``job_ids`` an earlier run left at their
    provider that this run will take over (``_resumable``) as this run's spend from its start
    (``RunContext.to_adopt``): each at what its takeover counts (``Ledger.reopen_attempt``:
    its known cost, else its reservation at the card as it is now). A new job listed before
    them reached its attempt row first and its reservation fitted the cap they then filled:
    a resume killed with three fal requests in flight, under ``--max-spend`` enough for them
    alone, paid for a fourth call beside them."""
    if ctx.cap_micros is None or not job_ids:
        return
    # a request whose id only the spool kept (the ledger broke as the provider accepted it),
    # which its job's task records before it takes it over (``_noted_request``): read from
    # the ledger alone, it was not counted, and a new job's call reserved the room it filled
    noted = ctx.spool.noted_jobs().intersection(job_ids)
    for row in ctx.ledger.left_requests(job_ids, ctx.run_id, noted):
        if not row["provider_request_id"] and not row["answer_url"]:
            kept = ctx.spool.noted_request(row["job_id"]) or {}
            if (kept.get("attempt"), kept.get("provider")) != (row["number"], row["provider"]):
                continue
            row["provider_request_id"] = kept["request_id"]
        # another process's request still ``started`` is taken over as ``unknown`` by the
        # claim (a live one's job is not claimed: its task ends, and it counts no more)
        if not row["moves"] or _resumable(ctx, [{**row, "status": "unknown"}]) is None:
            continue
        if row["cost_micros"] is not None:
            counted = row["cost_micros"]
        else:
            request = json.loads(row["request_json"])
            rates = ctx.rates.get(row["batch"]) or RateCards()
            entry = request["chain"][row["chain_index"]]
            counted = _reservation(ctx, entry, rates, request["params"])
            if counted is None:
                counted = row["reserved_micros"]
        if counted:
            ctx.to_adopt[row["job_id"]] = int(counted)


def _reservation(
    ctx: RunContext, entry: dict[str, Any], rates: RateCards, params: dict[str, Any]
) -> int | None:
    """What the budget reserves for a model's next attempt: the rate card's estimate for the
    images the request asks for (``n``, ``num_outputs``, ``num_images``: each billed), or,
    once an answer of that model has cost more per image asked for in this run (a card that
    charges tokens keeps ``per_image`` as its estimate, and a thinking model's answer can cost
    five times it), that dearer figure: a run whose reservations were all the estimate went
    on starting calls that its answers' real costs took past the cap. None (no estimate, a
    model run with ``--allow-unpriced``) stays None: such spend is not capped."""
    return estimate_for(entry, rates, params, ctx.dearest)


def estimate_for(
    entry: dict[str, Any],
    rates: RateCards,
    params: dict[str, Any],
    dearest: dict[tuple, Fraction],
) -> int | None:
    """A model's next attempt's cost as a budget reserves it (``_reservation``) and ``afc
    plan`` estimates it: its card's estimate for the images asked for, or the dearest known
    cost per image of its answers under that card (``dearest``: ``dearest_known``, then the
    run's own answers) times those images, when dearer."""
    images = images_requested(entry["provider"], params)
    megapixels = megapixels_requested(entry["provider"], params)
    estimate = rates.estimate(entry["provider"], entry["model"], images, megapixels)
    key, units = _dearest_unit(entry, rates, images, megapixels)
    known = dearest.get(key)
    if known is None and key[-1] == _PER_MEGAPIXEL:
        known = dearest.get(key[:-1])  # no answer of a known size yet: per image, as before
        units = images
    if estimate is None or known is None:
        return estimate
    # rounded up to a whole micro-USD once, for these images: the answers' per-image cost
    # rounded up first (0.0999999 for three images: 0.033334 each) reserved 0.100002 for
    # requests that cost 0.100000, and a budget those fitted exactly stopped one short
    return min(max(estimate, -(-known * units // 1)), MAX_ESTIMATE)


# the last part of a ``dearest`` key whose cost is per megapixel asked for (``_dearest_unit``)
_PER_MEGAPIXEL = "per_megapixel"


def _dearest_unit(
    entry: dict[str, Any], rates: RateCards, images: int, megapixels: int | None
) -> tuple[tuple, int]:
    """What a request's known dearest cost is counted in (``RunContext.dearest``'s key) and
    how many of them it asks for, given the ``images`` and ``megapixels`` it asks for
    (``images_requested``, ``megapixels_requested``): per megapixel where it says them and
    its card prices them (fal's ``image_size`` under ``per_megapixel``), else per image. Per
    image alone, once a 2048x2048 fal render had cost 0.10, each 1024x1024 one of the model
    (0.025) reserved 0.10 under a budget: one large and four small renders under
    --max-spend 0.20 stopped at 0.125 spent, three never sent
    (tests/test_audit64a_fal_sizes_budget.py)."""
    key = _priced_by(entry, rates)
    card = rates.cards.get((entry["provider"], entry["model"])) or {}
    if megapixels and "per_megapixel" in card:
        return (*key, _PER_MEGAPIXEL), megapixels
    return key, images


def _keep_dearest(
    dearest: dict[tuple, Fraction],
    entry: dict[str, Any],
    rates: RateCards,
    params: dict[str, Any],
    cost: int,
) -> None:
    """Keep ``cost``, an answer's to a request of ``params``, in ``dearest`` where it is the
    dearest yet per unit its request asked for (``_dearest_unit``), exact: for this run's
    answers (``_learn_cost``) and the ledger's (``dearest_known``) alike."""
    provider = entry["provider"]
    key, units = _dearest_unit(
        entry, rates, images_requested(provider, params), megapixels_requested(provider, params)
    )
    per_unit = Fraction(cost, units)
    if per_unit > dearest.get(key, 0):
        dearest[key] = per_unit


def estimated_models(cards: RateCards) -> set[tuple[str, str]]:
    """The models a budget reserves an estimate for (a card with no per-image price reserves
    nothing, ``_reservation``): those whose known costs ``dearest_known`` learns."""
    return {model for model, card in cards.cards.items() if "per_image" in card}


def _priced_by(entry: dict[str, Any], rates: RateCards) -> tuple:
    """What a model's answers are priced by: the model and its batch's rate card. Two
    batches may price one model differently (a price cut between their manifests): the
    answers of the dearer card raised the cheaper one's reservations, and a budget that fit
    both stopped with most of it unspent."""
    card = rates.cards.get((entry["provider"], entry["model"])) or {}
    return (entry["provider"], entry["model"], tuple(sorted(card.items())))


def made_images(usage: Any) -> bool:
    """Whether an answer's recorded usage says it made images (``images`` of 1 or more): the
    answers whose cost is the price of a render, which a budget's estimate learns
    (``_learn_cost``, ``dearest_known``). A failure made none: a Replicate prediction that
    ran into Replicate's own 30-minute limit is billed its 1800 s (4.14 USD at 0.0023 a
    second, for a model whose renders cost 0.01), and learnt as a render's price it made
    every later reservation of the model 4.14 USD: ``afc submit --max-spend 1.00`` started
    nothing and exited 4 having spent 0. Its cost still counts, in budgets and reports."""
    if not isinstance(usage, dict):
        return False
    made = usage_amount(usage.get("images"))
    return made is not None and made >= 1


def _learn_cost(
    ctx: RunContext,
    entry: dict[str, Any],
    rates: RateCards,
    params: dict[str, Any],
    cost: int | None,
    usage: Any,
) -> None:
    """Keep the dearest known cost of a model's answers under its card, per image asked for
    (exact), for ``_reservation``: of the answers that made images (``made_images``), what
    a render of the model costs."""
    if cost is None or cost <= 0 or not made_images(usage):
        return
    _keep_dearest(ctx.dearest, entry, rates, params, cost)


def dearest_known(
    ledger: Any, batches: Collection[str], rates: dict[str, RateCards]
) -> dict[tuple, Fraction]:
    """What ``RunContext.dearest`` starts from under a budget, and what ``afc plan``
    estimates with (``ledger``: a Ledger, or anything with its ``priced_answers``; the plan's
    are those ``read_admitted`` read): the dearest cost per image
    asked for of the answers (that made images: ``made_images``) the ledger already holds
    for each batch's models that have a per-image estimate (a card that charges tokens, whose images can cost several times its
    ``per_image``; a model that returns, and bills, more images than asked for), each priced
    again by the card the batch has now (a card changed since prices them as this run will
    be charged). Learnt only from this run's own answers, every resume under a budget sent a
    first wave of calls reserving the estimate again: 25 calls of a token card whose images
    cost four times its ``per_image`` took each ``afc resume --max-spend 1.00`` to 4.17 USD,
    the price already known from the run before."""
    dearest: dict[tuple, Fraction] = {}
    for batch in sorted(batches):
        cards = rates.get(batch)
        if cards is None:
            continue
        estimated = estimated_models(cards)
        if not estimated:
            continue
        # each recorded usage priced once (the answers of one size and quality report the same
        # tokens), and a job's request read only for an answer that could be the dearest yet
        # (its cost over one image: a 300,000-attempt batch took 6.5 s read row by row)
        priced: dict[tuple[str, str, str], int | None] = {}
        keys: dict[tuple[str, str], tuple] = {}
        for provider, model, usage_json, request_json in ledger.priced_answers(batch, estimated):
            seen = (provider, model, usage_json)
            if seen not in priced:
                try:
                    usage = json.loads(usage_json)
                except (TypeError, ValueError):
                    usage = None
                # a failure's cost (no image made) is not a render's price: ``made_images``
                priced[seen] = cards.price(provider, model, usage) if made_images(usage) else None
            cost = priced[seen]
            key = keys.get((provider, model)) or keys.setdefault(
                (provider, model), _priced_by({"provider": provider, "model": model}, cards)
            )
            sized = (*key, _PER_MEGAPIXEL)
            if not cost or cost <= min(dearest.get(key, 0), dearest.get(sized, 0)):
                continue
            try:
                params = json.loads(request_json).get("params") or {}
            except (TypeError, ValueError, AttributeError):
                continue
            if not isinstance(params, dict):
                continue
            _keep_dearest(dearest, {"provider": provider, "model": model}, cards, params, cost)
    return dearest


class _Stopped(Exception):
    """The run began stopping while an attempt waited for a provider's shared limit."""


async def run_job(ctx: RunContext, job_id: str) -> str:
    """Run one job (``_run_keyed``). One that a batch's multipart refusal held at its probe
    while other jobs of the batch were past theirs (``_storage_broke``) waits for them,
    holding no slot, and looks again once one's store succeeded (as one held by its batch's
    failing storage waits for the one look at it, ``_Outage``): left for the next run, a
    batch whose refusal came as a slot went round parked every job that reached its probe
    before the next store succeeded, a moment later, most of the batch (an hour's wait for a
    cron's next run, each time its large output was refused again)."""
    try:
        while True:
            status = await _run_keyed(ctx, job_id)
            lifted = ctx.refusal_held.pop(job_id, None)
            if lifted is None or status in TERMINAL:
                return status
            await lifted
            if ctx.stopping.is_set():
                return status
    finally:
        ctx.storing_for.pop(job_id, None)
        ctx.refusal_held.pop(job_id, None)
        # Told ended as its wait began, a held job that went on to be stored was said twice
        # in afc's plain lines ('ended waiting', then 'ended succeeded'), and counted twice
        # in the live panel: told once, here, if its last pass in this run was a wait
        told = ctx.told_waiting.pop(job_id, None)
        if told is not None:
            ctx.report(told, "ended", told["status"])


async def _run_keyed(ctx: RunContext, job_id: str) -> str:
    """Run one job (``_run_job``). A job whose output key in its storage another job of this
    run also has (``RunContext.output_of``: batches sharing a storage, an output template
    without {batch}) waits until that job's task has ended: run side by side, both probes
    found the key free and both renders were paid, the second thrown away at its store
    (OUTPUT_KEY_CONFLICT); one after the other, the second's probe finds the first's object
    and pays for nothing (or renders, if the first stored nothing)."""
    held = ctx.output_of.get(job_id)
    if held is None:
        return await _run_job(ctx, job_id)
    # set when this job lets go of the key: the next job of the key waits for it
    me = asyncio.get_running_loop().create_future()

    async def hold() -> None:
        # once its needs are settled (a job holding the key while it waited for a need that
        # waited for the key would wait for ever)
        while (holder := ctx.holding.get(held)) not in (None, me):
            await asyncio.wait({holder})
        ctx.holding[held] = me

    def let_go() -> None:
        if ctx.holding.get(held) is me:
            del ctx.holding[held]
        if not me.done():
            me.set_result(None)

    try:
        while True:
            status = await _run_job(ctx, job_id, hold)
            # Another job of the key that this run runs too holds a paid render of it
            # (``_wait_for_holder``): that job stores it here, so this one lets go of the key,
            # waits for that job's task (holding no slot) and looks again, once
            first = ctx.held_here.pop(job_id, None)
            if first is None or status in TERMINAL:
                return status
            let_go()
            await asyncio.wait({first})
            me = asyncio.get_running_loop().create_future()
    finally:
        let_go()


def _retried_said(ctx: RunContext, job_id: str, commands: bool = False) -> str:
    """How a job this run held came to be retried meanwhile, from the latest ``retried``
    event's ``previous_status``: a person's cancel, or another afc process that took the job
    over (its lease expired while this run was stalled) and failed it. Said 'cancelled and
    retried' either way, a person read the log looking for who had cancelled it.
    ``commands``: the commands that did it, in brackets."""
    was = None
    for event in ctx.ledger.events(job_id):
        if event["kind"] == "retried":
            was = json.loads(event["detail_json"] or "{}").get("previous_status")
    if was == "cancelled" or was is None:
        how = " ('afc cancel', then 'afc retry')"
        was = "cancelled"
    else:
        how = " ('afc retry')"
    return f"{was} and retried meanwhile" + (how if commands else "")


async def _run_job(
    ctx: RunContext, job_id: str, hold: Callable[[], Awaitable[None]] | None = None
) -> str:
    """Run one job from its first incomplete step. Returns its status afterwards.

    ``--concurrency`` bounds the jobs in their paid part (claim, probe, render): once a
    provider call returned (and a spool slot is held: below), the job gives its slot to the
    next render, spools its bytes under slots of their own (local writes that free them in a
    moment: rendered bytes never wait in memory behind slow uploads), then stores and
    verifies under the storage slots, so neither an fsync nor a slow upload holds back the
    next provider call.

    The render slot is given back only once a spool slot is taken: paid bytes wait in memory,
    where a crash loses them (and the next run pays again), for at most ``--concurrency`` jobs
    beside the spool slots' own. Given back first, a spool slower than the renders (a disk
    stalled, instant renders) let every job of the run render into memory: a SIGKILL after
    4 s of a 10,000-job run at 32 wide left 657 paid renders to pay again. Of the spool
    slots' holders, at most ``SPOOL_SLOTS`` write at once (``ctx.spool_writes``), so a wide
    wave's writes do not queue in the file helper ahead of the next wave's probes.
    """
    # run again after a wait in this run: its end is told below, and a claim that finds it
    # ended meanwhile (a person's cancel: its lease was given back for the wait) is its end
    waited = ctx.told_waiting.pop(job_id, None) is not None
    while True:
        if job_id in ctx.blocked:
            status = await wait_for_needs(ctx, job_id)
            if status != "queued":
                # left blocked too: the run is done with it (the live panel, told nothing,
                # ended on 'queued 1' for a job the ledger and the summary said blocked);
                # one a decision puts back meanwhile ends again at the run's end, counted once
                job = ctx.ledger.job(job_id)
                if job is not None:
                    ctx.report(job, "ended", status)
                return status
        if hold is not None:
            await hold()
        async with ctx.slots:
            job = ctx.ledger.claim(job_id, ctx.lease_s)
            current = ctx.ledger.job(job_id) if job is None and waited else None
            if current is not None and current["status"] == "cancelled":
                # a person's cancel while it waited in this run, holding no lease
                # (``run_job``): run here, and ended so; it said 'left to another afc
                # process', none there, and the summary's 'N run here' left it out while
                # counting it cancelled (one another process took and ended is that one's)
                ctx.report(current, "ended", current["status"])
                return current["status"]
            if job is None:
                # another afc process holds it (or ended it): not run here, and the summary's
                # "N run here" does not count it (it said "2 run here" of two jobs it left alone)
                ctx.ran -= 1
                ctx.left_elsewhere.add(job_id)
                current = ctx.ledger.job(job_id)
                if current is not None:
                    # told ended here, as a job taken over is: the live panel, told nothing,
                    # ended on 'queued 1' for it beside a summary that said it was left alone
                    ctx.report(current, "ended", LEFT_ELSEWHERE)
                return current["status"] if current else "missing"
            ctx.claimed_here.add(job_id)
            # the takeovers its row counts as this run takes it (a takeover since: below), and
            # its retries (a person's cancel and retry since: below; a retry zeroes takeovers)
            taken_before = job.get("takeovers") or 0
            retried_before = job.get("retries") or 0
            if job["status"] == "blocked":
                # given needs after this run began (a re-submit changes the gates of a job
                # not yet rendered that no run holds): it waits for them like any blocked job
                ctx.ledger.release(job)
                ctx.blocked.add(job_id)
                continue
            ctx.report(job, "started", job["step"])
            job["claimed_at"] = job["step"]  # where an earlier run left it (``verify``)
            if job["step"] != "probe":  # its store may end a refusal's hold (``_in_flight``)
                ctx.storing_for[job_id] = job["batch"]
            job = await _run_steps(ctx, job, RENDER_STEPS)
            spooling = job["status"] not in TERMINAL and job["step"] in SPOOL_STEP
            if spooling:
                stall_point("rendered")  # tests: a paid render's bytes in memory, not spooled
                await ctx.spool_slots.acquire()  # before the render slot goes (docstring)
        break
    if spooling:
        try:
            # Let the job that just took our render slot reach its provider call first:
            # renders are the long waits, storage work can follow a moment later.
            await asyncio.sleep(0)
            async with ctx.spool_writes:
                job = await _run_steps(ctx, job, SPOOL_STEP)
        finally:
            ctx.spool_slots.release()
        late = ctx.late_results.pop(job_id, None)
        if late is not None:  # its job ended elsewhere while it rendered (``spool``)
            async with ctx.store_slots:
                await _keep_late_result(ctx, *late)
    if job["status"] not in TERMINAL and job["step"] in STORE_STEPS:
        async with ctx.store_slots:
            ctx.storing.add(job_id)
            try:
                job = await _run_steps(ctx, job, STORE_STEPS)
            finally:
                ctx.storing.discard(job_id)
                _store_ended(ctx, job_id, job["batch"])
    if job["status"] not in TERMINAL:
        if job.get("unwritten_steps"):
            # stopped after a probe that wrote nothing (the run is stopping): the job rests
            # at the step it reached, with its step rows, as any other
            try:
                ctx.ledger.checkpoint(job, [], job["step"])
            except JobLost:
                pass
        ctx.ledger.release(job)
    ctx.protected.discard(job_id)  # no longer in a call or its storage work
    # a person cancelled it and then retried it while this run held it (in a backoff, a
    # provider's limit, its probe): no process took it over (a retry zeroes the takeover
    # count), so it waits for the next run, or another run has taken it on since
    retried = job.get("lost") and (job.get("retries") or 0) > retried_before
    if retried and job["status"] != "cancelled" and job["status"] in (*TERMINAL, "awaiting_review"):
        # and that run has ended it: its end is not this run's (counted here too, the
        # workers' summaries counted the job twice); one cancelled again is, as any job a
        # person cancels while a run holds it
        ctx.ended_elsewhere.add(job_id)
        ctx.report(
            job,
            "ended",
            f"here: {_retried_said(ctx, job_id)}, and another afc process ended it "
            f"({job['status']})",
        )
    elif retried and job["status"] not in TERMINAL:
        # said 'taken over by another afc process, which goes on with it', a person left it
        # queued, waiting for a process that did not exist
        holder = job.get("lease_owner")
        ctx.report(
            job,
            "ended",
            f"here: {_retried_said(ctx, job_id, commands=True)}: "
            + (
                "another afc process has taken it on since"
                if holder and not is_host_lease(holder)
                else f"it is {job['status']} again, for the next run (or a worker's next "
                "claim) to take"
            ),
        )
    elif job.get("lost") and job["status"] not in TERMINAL:
        # its lease expired while this process was stalled, and another took the job over
        ctx.report(job, "ended", "here: taken over by another afc process, which goes on with it")
        _shared_host_id(ctx, job.get("lease_owner"))
    elif (
        job.get("lost")
        and (job.get("takeovers") or 0) > taken_before
        and ctx.ledger.taken_from_here(job_id)
    ):
        # and that process has ended it: its end is not this run's, and the workers'
        # summaries counted the job twice (this run's 'ended succeeded' and that one's). A
        # job a person cancelled while this run held it is this run's to count, as before,
        # also where another process took it from this one before (a takeover in the night,
        # that process failing it, a person's retry, this worker's claim): only a takeover
        # since this run took it (its row's count grew) makes its end another's
        ctx.ended_elsewhere.add(job_id)
        ctx.report(
            job,
            "ended",
            f"here: taken over by another afc process, which ended it ({job['status']})",
        )
    elif job_id in ctx.refusal_held or job_id in ctx.held_here:
        # told waiting (``_storage_gave_up``, ``_wait_for_holder``); it may go on in this run,
        # so its end is told once it goes no further (``run_job``)
        ctx.told_waiting[job_id] = job
    else:
        ctx.report(job, "ended", job["status"])
    return job["status"]


def _shared_host_id(ctx: RunContext, holder: str | None) -> None:
    """A job this run held was taken over by an owner that names this host but is no
    process of it (``owner.owner_is_dead``): another machine runs afc under this host's id
    (``AFC_HOST_ID``, a worker.env copied to every machine, or one host name shared by
    containers), an older afc whose owner ids carry no fingerprint (``owner.sees_process``:
    this build leaves another machine's live jobs alone until their leases run out, but an
    older one takes them over at once, their pids being none of its own, and both pay for
    them): said, naming the id and the holder, once a run."""
    if (
        ctx.host_id_said
        or not holder
        or is_host_lease(holder)
        or host_of(holder) != host_id()
        or not owner_is_dead(holder)
    ):
        return
    ctx.host_id_said = True
    ctx.notice(
        f"a job of this run was taken over by {holder}, which names this host "
        f"({host_id()!r}) but is no process of it: another machine runs an older afc with "
        "the same AFC_HOST_ID (or host name), which takes this host's jobs over at once, "
        "paying for them again; upgrade it, and give every machine its own AFC_HOST_ID"
    )


async def wait_for_needs(ctx: RunContext, job_id: str) -> str:
    """Settle a blocked job against its needs (``Ledger.settle_blocked``): ``queued`` when
    every need has succeeded, ``failed`` (DEPENDENCY_FAILED) when one ended badly. While a
    need is still being worked on by this run, wait for it (holding no render slot); a need
    left awaiting review, waiting or held by another process leaves the job ``blocked`` for
    a later run."""
    while True:
        status, waiting = ctx.ledger.settle_blocked(job_id)
        if status != "blocked":
            return status
        here = [ctx.tasks[n] for n in waiting if n in ctx.tasks and not ctx.tasks[n].done()]
        if not here or ctx.stopping.is_set():
            return "blocked"
        await asyncio.wait(here)
        if all(_task_status(task) == "awaiting_review" for task in here):
            # Each need it waited for here now waits for a person, so no look can run it in
            # this run: it stays blocked (the run's end looks again, ``run._settle_left``, as
            # a decision may come meanwhile). Looked at again, a gated submit's every shot
            # woke to a transaction that found it still blocked as its style frame ended
            # (20,000 shots: 40,000 statements).
            return "blocked"


def _task_status(task: asyncio.Future) -> str | None:
    """The status a job's ended task returned (None: cancelled, or it raised)."""
    if task.cancelled() or task.exception() is not None:
        return None
    return task.result()


async def _run_steps(ctx: RunContext, job: dict[str, Any], steps: frozenset[str]):
    try:
        while job["status"] not in TERMINAL and job["step"] in steps:
            step = STEPS.get(job["step"])
            if step is None:
                raise RuntimeError(f"job {job['key']} is at unknown step {job['step']!r}")
            if not await step(ctx, job):
                break
    except JobLost:
        job = {**ctx.ledger.job(job["id"]), "lost": True}
    return job


# --- probe ------------------------------------------------------------------------------------


def ownership(job: dict[str, Any], info: ObjectInfo) -> str | None:
    """None if the key is free or this job's own; otherwise why it belongs to someone else."""
    meta = info.meta
    if meta is None:
        return "an object that afc did not write (no afc metadata)" if info.exists else None
    if not meta.get("job_id"):
        # a damaged sidecar (an interrupted copy, a disk error) or another tool's: it read as
        # 'the output of another job ('unknown', job id None)', of this job's own output too
        what = (
            f"cannot be read ({meta['unreadable']})" if meta.get("unreadable") else "names no job"
        )
        if info.exists:
            return f"an object whose afc metadata {what}, so afc cannot tell whose output it is"
        return f"no object but afc metadata that {what}, so afc cannot tell whose key it is"
    if meta.get("job_id") != job["id"]:
        other = meta.get("key") or meta.get("job_id")
        if meta.get("key") and meta.get("batch"):
            other = f"{meta['batch']}/{meta['key']}"  # as a manifest names another batch's job
        if not info.exists:
            # written first, the metadata alone: that job's store was cut short (its next run
            # completes it), or is under way; the key is that job's
            return (
                f"the metadata of another job's output ({other!r}, job id {meta['job_id']}), "
                "its object not written yet: that job's store was interrupted or is under way, "
                "and a run of that job completes it"
            )
        return f"the output of another job ({other!r}, job id {meta.get('job_id')})"
    if meta.get("request_hash") != job["request_hash"]:
        return (
            f"this key's output for a different request (hash {meta.get('request_hash')}, "
            f"this request is {job['request_hash']})"
        )
    return None


async def _fail_conflict(
    ctx: RunContext,
    job: dict[str, Any],
    storage: Storage,
    info: ObjectInfo,
    why: str,
    step,
    *,
    replaced: bool = False,
):
    """``why`` (``ownership``'s reason) ends the job. An object of this very job (its id in the
    metadata) for another request is the same (batch, key) admitted with another body, found
    in storage (a lost or another ledger) rather than at admission: an idempotency conflict
    like admission's (exit 3), not another's object.

    A job that meets the conflict with its paid render in the spool (the key taken while it
    rendered: at its store step, or at the probe of its retry) is told so, and the way to
    store that render: the message said only that afc never overwrites the object, and a
    person read the render as lost, gave the job a new key and paid for it again, while the
    render paid for stayed in the spool for good (a failed job's file is never swept).

    ``replaced``: the object was found at the read-back of this job's own upload, which the
    store took create-only: a second write replaced it there, which the store let through."""
    same_key = (info.meta or {}).get("job_id") == job["id"]
    spooled = ctx.spool.path(job["id"])
    kept = (
        f". This job's paid render is kept in {spooled}: once the key is free (that object "
        f"moved away), 'afc retry {job['key']}' on this host ({host_id()}) stores it, no new "
        "render"
        if spooled.exists()
        else ""
    )
    ctx.ledger.finish(
        job,
        "failed",
        step=step,
        outcome="conflict",
        error_code="IDEMPOTENCY_CONFLICT" if same_key else "OUTPUT_KEY_CONFLICT",
        error_class="invalid",
        error_message=f"{storage.describe(job['output_key'])} already holds {why}; "
        "afc never overwrites it"
        + (
            ". It replaced this job's upload after the store took it: the store let a "
            "second write over an existing object (one that takes afc's 'If-None-Match: *' "
            "and ignores it, as some S3-compatible stores and proxies in front of them do), "
            "or a tool wrote there without that condition"
            if replaced
            else ""
        )
        + (
            " (give the changed request a new key, or run the earlier request with the ledger"
            " that admitted it)"
            if same_key
            else ""
        )
        + kept,
    )


class _HeldForBatch(StorageError):
    """A job held at its probe by another job's refused upload, or by its batch's storage
    failing in this run (``_storage_broke``): no request of its own was made, so it is not
    one of its storage failures. ``wait``: what it waits for in this run (``run_job``)."""

    def __init__(self, message: str, wait: Callable[[], Awaitable[Any]] | None = None):
        super().__init__(message, retryable=False)
        self.wait = wait


@dataclass
class _Outage:
    """A batch's storage failing in this run: a job's own storage work spent the policy's
    tries on 5xx, throttling, timeouts or resets (``_storage_gave_up``; an upload so given
    up, with no write of the store answered, holds the batch until a store of it succeeds
    instead, ``RunContext.storage_denied``: a look's HEAD says nothing of writes). No probe
    of the batch makes a request until ``until`` (time.monotonic); then one look (``trial``,
    the HEAD of a held job's key under the policy) says whether it answers again: the held
    jobs go on, or wait for the next run."""

    error: StorageError
    until: float
    trial: asyncio.Future | None = None


async def _until_storage_back(ctx: RunContext, key: str, down: _Outage, batch: str) -> None:
    """Until the batch's one look after its pause (``_Outage``) has ended, either way."""
    if down.trial is None:
        down.trial = asyncio.ensure_future(_look_again(ctx, key, down, batch))
    await asyncio.wait({down.trial})


async def _look_again(ctx: RunContext, key: str, down: _Outage, batch: str) -> bool:
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(ctx.stopping.wait(), max(0.0, down.until - time.monotonic()))
    if not ctx.stopping.is_set():
        storage = ctx.storages[batch]
        try:
            await _storage(ctx, storage, storage.head, key)
            return True
        except StorageError as exc:
            down.error = exc
    down.until = time.monotonic() + STORE_PAUSE_S  # the batch's later probes wait so long
    return False


def _in_flight(ctx: RunContext, batch: str) -> list[asyncio.Future]:
    """The tasks of this run's jobs of ``batch`` past their probe, still running: each may
    yet store its output, which ends a multipart refusal's hold (none held by it)."""
    return [
        task
        for job_id, name in ctx.storing_for.items()
        if name == batch
        and job_id not in ctx.refusal_held
        and (task := ctx.tasks.get(job_id)) is not None
        and not task.done()
    ]


async def _until_a_store(ctx: RunContext, batch: str) -> None:
    """Until a store of ``batch`` succeeds in this run, or no job of it past its probe is
    left running (the held job then looks again, and waits for the next run)."""
    lifted = ctx.stored_ok.get(batch)
    if lifted is None:
        lifted = ctx.stored_ok[batch] = asyncio.get_running_loop().create_future()
    while not lifted.done() and not ctx.stopping.is_set():
        running = _in_flight(ctx, batch)
        if not running:
            return
        await asyncio.wait({lifted, *running}, return_when=asyncio.FIRST_COMPLETED)


def note_stores_first(ctx: RunContext, job_ids: list[str]) -> list[str]:
    """``job_ids`` in the order their tasks start: first the jobs resting at their store step
    whose storage failed in an earlier run (``Ledger.stores_to_retry``), noted per batch in
    ``RunContext.stores_first``. Their uploads cost nothing, and they take their
    ``--concurrency`` slots (``Slots``: in turn) before any job of theirs is probed, so a
    probe of their batch finds them claimed and waits for the first store's end
    (``_stores_first``): a refusal it meets (``StorageDenied``) holds the batch's renders.
    Started in the jobs' order, the run's first probes paid for renders beside those uploads,
    before the first was refused again: a role without s3:PutObject on the prefix had every
    cron run pay for --concurrency renders or more, each refused in turn, the whole batch
    rendered into the spool over the runs (20 jobs at 4 wide: 8, 12, 16, 20 paid in four
    runs; tests/test_stores_first.py)."""
    retried = ctx.ledger.stores_to_retry(job_ids)
    for job_id, batch in retried:
        ctx.stores_first.setdefault(batch, set()).add(job_id)
    first = [job_id for job_id, _ in retried]
    taken = set(first)
    return first + [job_id for job_id in job_ids if job_id not in taken]


async def _stores_first(ctx: RunContext, job: dict[str, Any]) -> None:
    """Before this job's probe pays for anything: until a store of its batch's jobs that
    retry an earlier run's failed upload (``note_stores_first``) has ended in this run, either
    way, or none of them is left claimed by this run and running. The job keeps its slot: those
    jobs took theirs before it (``Slots`` serves in turn) and need none for their stores."""
    batch = job["batch"]
    while not ctx.stopping.is_set():
        waiting = ctx.stores_first.get(batch)
        if not waiting:
            return
        claimed = []
        for job_id in list(waiting):
            task = ctx.tasks.get(job_id)
            if task is None or task.done():
                waiting.discard(job_id)  # ended with no store of its own in this run
            elif job_id in ctx.storing_for:
                claimed.append(task)
        if not claimed:
            return
        answered = ctx.first_store.get(batch)
        if answered is None:
            answered = ctx.first_store[batch] = asyncio.get_running_loop().create_future()
        stopping = asyncio.ensure_future(ctx.stopping.wait())  # a stopping run waits no more
        try:
            await asyncio.wait({answered, stopping, *claimed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()


def _store_ended(ctx: RunContext, job_id: str, batch: str) -> None:
    """A job's store steps ended in this run: if it was one its batch's probes wait for
    (``_stores_first``), they wait no more; what it met (a refusal, an outage) is in the
    run's context for their checks (``_storage_broke``)."""
    waiting = ctx.stores_first.get(batch)
    if waiting is None or job_id not in waiting:
        return
    del ctx.stores_first[batch]
    answered = ctx.first_store.pop(batch, None)
    if answered is not None and not answered.done():
        answered.set_result(None)


async def _storage_broke(ctx: RunContext, job: dict[str, Any]) -> None:
    """Before a render is paid for, in a run where this job's batch's store or verify gave up:
    the storage checked again as before the run (``Storage.check``: the bucket's HEAD, the
    folder writable), raising its StorageError while it fails. A probe's HEAD of a key in an
    S3 bucket deleted mid-batch answers a bodiless 404, read as 'nothing stored here' (a file
    folder remounted read-only still answers its stats): every later job was rendered and
    paid for, each one's store refused, its bytes piling up in the spool. First, the batch's
    uploads left by an earlier run's failing storage are tried (``_stores_first``)."""
    await _stores_first(ctx, job)
    denied = ctx.storage_denied.get(job["batch"])
    if denied is not None and time.monotonic() < denied[1]:
        # an upload refused for want of permission (a role without s3:PutObject on the
        # prefix, or kms:GenerateDataKey): the bucket's HEAD passes all the same, and every
        # job of the batch was rendered and paid for, each one's upload refused
        ctx.storing_for.pop(job["id"], None)  # held: its own store ends no hold
        if not isinstance(denied[0], StorageDenied):
            # uploads given up on the store's own failing (5xx, SlowDown, timeouts, resets)
            # with no write of it answered (``_storage_gave_up``): its reads, this probe's
            # HEAD and the bucket's check, may pass all the same. A store of the batch that
            # succeeds in this run lifts the hold (an upload from a spool file costs nothing
            # to try, a render does); with no job of it past its probe left, none can
            if _in_flight(ctx, job["batch"]):
                raise _HeldForBatch(
                    f"{denied[0].message}; uploads of batch {job['batch']} failed in this run: "
                    f"this job waits for the stores of batch {job['batch']} in flight in this "
                    "run, and goes on once one succeeds",
                    wait=partial(_until_a_store, ctx, job["batch"]),
                )
            raise _HeldForBatch(
                f"{denied[0].message}; uploads of batch {job['batch']} failed in this run, "
                "and none has succeeded since: this job waits for the next run, nothing paid "
                "(that run tries the waiting uploads first)"
            )
        if denied[0].large_only:
            # a multipart upload's request refused: this job's output may be small, but afc
            # cannot tell an output's size before paying for its render. A store of the batch
            # that succeeds later in this run lifts the hold: while a job of the batch past
            # its probe may store, this one waits for it in this run (``run_job``); with none
            # left, it rests until the next run
            if _in_flight(ctx, job["batch"]):
                raise _HeldForBatch(
                    f"{denied[0].message}; this job waits for the stores of batch "
                    f"{job['batch']} in flight in this run: one that succeeds lets it go on (its "
                    "output may be over the size that makes a multipart upload as well; afc "
                    "cannot tell an output's size before paying for its render)",
                    wait=partial(_until_a_store, ctx, job["batch"]),
                )
            raise _HeldForBatch(
                f"{denied[0].message}; this job waits for the next run: its output may be over "
                "the size that makes a multipart upload as well (afc cannot tell an output's "
                f"size before paying for its render); of batch {job['batch']}, only the jobs "
                "that reach their probe after a store of it succeeds are rendered in this run"
            )
        raise _HeldForBatch(
            f"{denied[0].message}; no other job of batch {job['batch']} is rendered in this "
            "run, its upload would be refused as well"
        )
    down = ctx.storage_down.get(job["batch"])
    if down is not None:
        # Its storage failing in this run: probed one by one, each job's HEAD spent the
        # policy's tries on it, 3 requests a job (30,000 to a store answering 503 SlowDown
        # to a 10,000-job resume, 20 minutes at 8 wide), and counted one of its failures
        if down.trial is None or not down.trial.done():
            ctx.storing_for.pop(job["id"], None)
            raise _HeldForBatch(
                f"{down.error.message}; the storage of batch {job['batch']} failed in this run:"
                f" this job waits (at most {STORE_PAUSE_S:.0f} s) for one look at it, and goes "
                "on if it answers",
                wait=partial(_until_storage_back, ctx, job["output_key"], down, job["batch"]),
            )
        if not down.trial.result() and time.monotonic() < down.until:
            ctx.storing_for.pop(job["id"], None)
            raise _HeldForBatch(
                f"{down.error.message}; the storage of batch {job['batch']} failed in this run, "
                "and again when looked at after a pause: this job waits for the next run, "
                "nothing paid"
            )
        del ctx.storage_down[job["batch"]]  # it answered, or its pause is over: look
    if job["batch"] not in ctx.storage_failed:
        return
    storage = ctx.storages[job["batch"]]
    await _storage(ctx, storage, storage.check_again)
    ctx.storage_failed.discard(job["batch"])  # usable: a failure of that one key alone


async def probe(ctx: RunContext, job: dict[str, Any]) -> bool:
    job["probed"] = True  # by this run: its render step need not look again (``render``)
    storage = ctx.storages[job["batch"]]
    try:
        await _storage_broke(ctx, job)
        info = await _storage(ctx, storage, storage.head, job["output_key"])
    except StorageError as exc:
        return _storage_gave_up(ctx, job, "probe", exc)
    foreign = ownership(job, info)
    if foreign:
        await _fail_conflict(ctx, job, storage, info, foreign, "probe")
        return False
    if info.exists:
        # Stored by this very job (an earlier run, or a ledger rebuilt over the same storage):
        # succeed from storage, no provider call; count the render it saved.
        meta = info.meta
        try:
            await _sync_dirs(ctx, storage, job["output_key"])  # its folder durable first
        except StorageError as exc:
            return _storage_gave_up(ctx, job, "probe", exc)
        # the render this ledger paid for (a job cancelled or failed after its store, and
        # retried) is used, but no render was avoided: its attempt adopted as at render
        own = _paid_here(ctx, job, meta)
        cost, source = _micros(meta.get("cost")), meta.get("cost_source")
        if cost is None and meta.get("provider") and not own:
            rates = ctx.rates.get(job["batch"]) or RateCards()
            # the card's price of the request: every image it asks for (as ``afc plan``)
            params = json.loads(job["request_json"]).get("params") or {}
            cost = rates.estimate(
                meta["provider"],
                meta.get("model"),
                images_requested(meta["provider"], params),
                megapixels_requested(meta["provider"], params),
            )
            source = "rate_card" if cost is not None else None
        with ctx.ledger.tx():
            ctx.ledger.checkpoint(
                job,
                [("probe", {"found": "own output"})],
                "verify",
                outcome="stored",
                output_sha256=meta.get("sha256"),
                output_size=meta.get("size"),
            )
            if own:
                _adopt_stored(ctx, job, meta)
            else:
                ctx.ledger.record_avoided(
                    job, "stored", meta.get("provider"), meta.get("model"), cost, source
                )
        return True
    # Nothing stored: the job goes on to render with no write of its own here. The probe's
    # step row and the job's move to ``render`` are written with its attempt row
    # (``Ledger.start_attempt``), or with its terminal or waiting write if it ends or waits
    # first, or before a stopping run releases it (``run_job``); until then the ledger has it
    # at ``probe``, and a crash before that makes the next run look again (one more look, no
    # payment).
    job["step"] = "render"
    job.setdefault("unwritten_steps", []).append(("probe", {"found": None}, ctx.ledger.clock()))
    ctx.storing_for[job["id"]] = job["batch"]  # its store may end a refusal's hold
    return True


def _paid_here(ctx: RunContext, job: dict[str, Any], meta: dict[str, Any]) -> bool:
    """Whether the object a probe found at the job's key holds a render this ledger paid
    for: its metadata names an attempt of the job here (provider and number) that may have
    made it. A job cancelled awaiting review, or failed VERIFY_FAILED and retried once its
    object read back whole, found its own paid render at its probe, and ``afc costs report``
    counted it as a render avoided at its price, beside that same render's cost: one render
    paid for, and as much said saved."""
    if not job["attempts"]:
        return False
    return any(
        a["number"] == meta.get("attempt")
        and a["provider"] == meta.get("provider")
        and a["status"] in ("succeeded", "started", "unknown")
        for a in ctx.ledger.attempts(job["id"])
    )


# --- render and spool -----------------------------------------------------------------------------


async def render(ctx: RunContext, job: dict[str, Any]) -> bool:
    spooled = None
    if job["attempts"]:  # only an attempt leaves a spool file (none for a fresh job)
        try:
            spooled = await ctx.offload(ctx.spool.find, job["id"])
        except OSError as exc:
            # It may hold a render paid for, so the job is not rendered again before it is
            # read; and the run stops as when a spool cannot be written (the calls in flight
            # finish and their renders are kept). Raised as it was, it ended the run at once,
            # cancelling them (tests/test_audit54b_spool_unreadable.py)
            raise SpoolUnreadable(
                f"cannot read the spool file of {job['batch']}/{job['key']} "
                f"({exc.strerror or exc}: {ctx.spool.path(job['id'])}): it may hold a render "
                "already paid for, so the job is not rendered again before it is read; make it "
                "readable (or move it away to render the job anew), then run 'afc resume'.",
                job=f"{job['batch']}/{job['key']}",
            ) from None
        if spooled is None:  # a late render a run that died left under its own name
            spooled = await ctx.offload(ctx.spool.find_late, job["id"])
    elif job["id"] in ctx.left_in_spool:
        # a job the ledger has no attempt of, whose file the spool held as the run began:
        # the render of a ledger deleted or made anew while its store kept failing
        left = await ctx.offload(ctx.spool.left_by, job["id"], job["request_hash"])
        if left is not None:
            _adopt_left(ctx, job, *left)
            return True
    if spooled is not None:
        about = await ctx.offload(ctx.spool.record_of, job["id"], spooled)
        if about is None:
            paid = _paid_render(ctx, job, await ctx.offload(ctx.spool.about_of, job["id"]))
            if paid is not None:  # the file is not the render paid for: damaged since
                spooled, about = SpoolFile(spooled.path, paid["size"], paid["sha256"]), paid
            else:
                spooled = _as_checkpointed(ctx, job, spooled)
        _adopt_spool(ctx, job, spooled, about or {})
        return True
    if not job["attempts"] and not job.get("probed"):
        # Its probe was an earlier run's (it waited at this step: the budget, a held key), and
        # another ledger sharing the storage may have stored the key since: look again, as
        # the probe does, before paying.
        return await probe(ctx, job)
    if job["attempts"]:
        # A job that rendered before may have been stored and its spool removed while its
        # later checkpoints were lost with the process: look before paying again.
        storage = ctx.storages[job["batch"]]
        try:
            await _storage_broke(ctx, job)
            info = await _storage(ctx, storage, storage.head, job["output_key"])
        except StorageError as exc:
            return _storage_gave_up(ctx, job, "render", exc)
        foreign = ownership(job, info)
        if foreign:
            # another job's or request's (a ledger sharing the storage stored the key since):
            # its store would refuse this render, so none is paid for, as at the probe
            await _fail_conflict(ctx, job, storage, info, foreign, "render")
            return False
        if info.exists:
            return await _found_stored(ctx, job, storage, info)

    request = json.loads(job["request_json"])
    chain = request["chain"]
    rates = ctx.rates.get(job["batch"]) or RateCards()
    base = job["attempt_base"]
    # Read when a new request is about to be sent, not before: a request a dead run left at
    # a job-style provider is polled by its id and needs no input, so an input file changed
    # or a need's output unreadable since then must not abandon a render already paid for.
    # Read anew for each attempt, holding the job's slots (below), and let go before the
    # next wait: read before the waits, every job of a run waiting out a provider's limit or
    # a backoff (its slot given back) held its inputs, 40 jobs with a 16 MiB reference
    # 640 MiB, a big batch more than the machine had.
    # this run's calls whose end may make room, and a pause (``_may_make_room``)
    settling: tuple[set[asyncio.Future], float | None] | None = None
    backed_off: int | None = None  # the attempts a backoff was waited out after
    while True:
        inputs: tuple | None = None if job.get("inputs_json") else ()
        # Between attempts a job may wait (backoff, provider limits): a stopping run may cut
        # such a wait short, so the job is not "in a call" until its next attempt row.
        ctx.protected.discard(job["id"])
        ctx.landing.discard(job["id"])
        if settling is not None:
            await _await_settling(ctx, job, settling)
            # cancelled (or taken over) while it waited: the budget refuses the attempt before
            # the attempt's own check of the job, so a job waiting for a shared budget's other
            # workers' calls waited for them (as one waiting for a provider's limit did)
            if settling[1] is not None and _ended_elsewhere(ctx, job) is not None:
                raise JobLost(job["id"])
            settling = None
        if ctx.stopping.is_set():
            # no new provider call once the run is stopping; but a job whose last attempt
            # ended its chain (one that failed in the grace period) is failed now, as the next
            # run would fail it, paying nothing: not left queued, its failure unsaid
            if job["attempts"]:
                rows = ctx.ledger.attempts(job["id"])
                if rows and rows[-1]["status"] == "failed":
                    decision = next_try(
                        chain, counted(rows, base), after_interrupt=interrupted_last(rows, base)
                    )
                    if isinstance(decision, GiveUp):
                        _chain_over(ctx, job, decision)
            return False
        rows = ctx.ledger.attempts(job["id"]) if job["attempts"] else []
        rows = _noted_request(ctx, job, rows)
        resume = _resumable(ctx, [r for r in rows if r["number"] > base])
        # counted as spent until now (``count_adoptions``): from here, by its reopened
        # attempt, or not at all (a new attempt reserves its own)
        ctx.to_adopt.pop(job["id"], None)
        if resume is not None:
            # A job-style provider has this request already (a run died while it rendered):
            # poll it instead of paying for a new one.
            chain_index, number = resume["chain_index"], resume["number"]
            entry = chain[chain_index]
            # reserved as the card it will be priced by says (``Ledger.reopen_attempt``)
            reserve = _reservation(ctx, entry, rates, request["params"])
            if not ctx.ledger.reopen_attempt(job, resume, ctx.run_id, reserve):
                raise JobLost(job["id"])
            ctx.adopted.add((job["id"], resume["provider"], number))
            ctx.spool.forget_request(job["id"])  # its id is committed now (``_noted_request``)
            wait = None
            looked = _awake_stamp()  # held since: its spool step looks again (``_lost_since``)
        else:
            if _interrupts(rows, base) >= ctx.max_interrupts:
                ctx.ledger.finish(
                    job,
                    "dead",
                    step="render",
                    outcome="failed",
                    error_code="CRASH_LOOP",
                    error_class=INTERRUPTED,
                    error_message=f"the runs working on this job ended during its provider call "
                    f"{plural(_interrupts(rows, base), 'time')} "
                    f"(AFC_MAX_INTERRUPTS={ctx.max_interrupts});"
                    " each of those attempts may have been paid. See 'afc show "
                    f"{job['key']}', fix the cause, then 'afc retry {job['key']}'.",
                )
                return False
            decision = next_try(
                chain, counted(rows, base), after_interrupt=interrupted_last(rows, base)
            )
            if isinstance(decision, GiveUp):
                _chain_over(ctx, job, decision)
                return False
            chain_index, entry, wait = decision.chain_index, chain[decision.chain_index], None
            if decision.delay > 0:
                wait = decision.delay
            if wait is not None and backed_off != len(rows):
                # once per attempt it follows: a job the budget then refused, which waited for
                # room (``_may_make_room``), does not wait out the same backoff again
                backed_off = len(rows)
                ctx.ledger.set_waiting(job, backoff_reason(wait, decision.after))
                ctx.report(
                    job,
                    "waiting",
                    f"{wait:.2f}s after {decision.after}",
                    reason=decision.after,
                    until=time.time() + wait,
                )
                async with ctx.idle():
                    await ctx.rest(job["id"], wait)  # JobLost: cancelled meanwhile
                if ctx.stopping.is_set():
                    return False
        # a provider's own limits (manifest ``limits``) are waited for before the attempt row,
        # and the wait gives the job's slot back
        if job["status"] == "waiting" and resume is None:
            # a job that rests 'waiting' (its backoff over, the budget's room made) and now
            # waits for its provider's slot says so: 'afc status' said 'backoff 0.05s after
            # rate_limited' for as long as the provider's other calls held it back, minutes
            limited = ctx.slot_wait(entry["provider"])
            if limited is not None:
                ctx.ledger.set_waiting(job, limited)
                ctx.report(job, "waiting", limited, reason="provider limit")
        # a request a run that ended left (``resume``: polled, or its paid output fetched from
        # its URL) starts no call: the run's count of ``per_minute`` took one for each, so
        # the renders a killed run left, each fetched by every run after it however old
        # (``_resumable``), held the provider's starts back from the batch's new renders
        async with ctx.provider_slot(entry["provider"], job["id"], start=resume is None) as slot:
            if ctx.stopping.is_set():
                return False
            provider = ctx.providers[entry["provider"]]
            if resume is None and (_disk_low(ctx, job) or await _storage_low(ctx, job)):
                return False
            if resume is None and inputs is None:  # its slot and the provider's held
                inputs = await _read_inputs(ctx, job)
                if inputs is None or ctx.stopping.is_set():
                    return False
            refused = ctx.refused.get((entry["provider"], entry["model"]))
            if resume is None and refused is not None:
                # A key refused (401), an account out of money (OpenAI's insufficient_quota,
                # Replicate's 402), a model the key may not use (403): met by every job, one
                # free request each, and each job failed ('auth' ends its chain) for a person
                # to retry: a 10,000-job batch sent 10,000 requests to be refused. The jobs
                # after the first wait for the next run instead, nothing sent; that run sends
                # one request again (the key or the account fixed meanwhile, or not).
                ctx.ledger.set_waiting(
                    job,
                    f"not sent: {entry['provider']}/{entry['model']} refused a request of this "
                    f"run ({refused}); this job waits for the next run, nothing sent or paid: "
                    "fix the key or the account, then run afc resume",
                )
                ctx.report(job, "waiting", "provider refused", reason="provider refused")
                # a worker's rounds leave it alone a while (each would send one refused
                # request again); a person's 'afc resume' tries it at once
                ctx.ledger.pause_claims(job["id"], REFUSED_PAUSE_S, idle=True)
                return False
            # from its attempt row to the end of its storage work, a stopping run lets this
            # job finish (within the grace period) rather than abandon a paid call
            ctx.protected.add(job["id"])
            provider.warm()  # its client (imports, TLS) made before the row, not after it
            if resume is None:
                try:
                    number = await _start_attempt(
                        ctx, job, chain_index, entry, wait, rates, request["params"]
                    )
                except _Stopped:
                    return False
                except BudgetExhausted as exc:
                    # the budget refuses before the attempt's fence looks at the job: one a
                    # person cancelled meanwhile (or another process took over) is no stop of
                    # this run's by its budget, which exited 4, 'every waiting job resumes',
                    # with no job waiting (outside audit 59a)
                    if _ended_elsewhere(ctx, job) is not None:
                        raise JobLost(job["id"]) from None
                    settling = _may_make_room(ctx, job, exc)
                    if settling is not None:
                        continue  # waits outside its slots for one of them to end (above)
                    ctx.budget_hit = True
                    shared = (ctx.run_id or "").startswith(SHARED_BUDGET)
                    spender = (
                        f"the workers of budget {ctx.run_id[len(SHARED_BUDGET) :]} have"
                        if shared
                        else "this run has"
                    )
                    # a model with no per-image price (--allow-unpriced) has no estimate:
                    # unpriced, never 'estimated at 0.000000'
                    next_one = (
                        f"is estimated at {format_usd(exc.estimate)}"
                        if exc.priced
                        else f"is unpriced ({entry['provider']}/{entry['model']} has no "
                        "per-image price)"
                    )
                    ctx.ledger.set_waiting(
                        job,
                        f"budget: {spender} spent or reserved {format_usd(exc.spent)} of "
                        f"{format_usd(exc.cap)} USD; the next attempt {next_one}",
                    )
                    ctx.report(job, "waiting", "budget reached", reason="budget reached")
                    return False
                except OutputHeld as held:
                    _wait_for_holder(ctx, job, held)
                    return False
                if number is None:
                    raise JobLost(job["id"])
                slot.started = True
                if inputs:
                    from afc_cli.inputs import recorded

                    ctx.ledger.set_attempt_inputs(job, number, entry["provider"], recorded(inputs))
                looked = _awake_stamp()
                await ctx.ledger.committed()  # the attempt row is on disk before the call
                stall_point("after_attempt_row")
                if ctx.stopping.is_set():
                    # The run began stopping while the row was committed: the request never
                    # left this machine, so this attempt is known to have cost nothing.
                    _never_sent(ctx, job, number, chain_index, entry, "afc was stopping")
                    return False
                left = job.pop("output_left", ())
                if job.pop("output_shared", False):
                    taken = await _stored_meanwhile(ctx, job, number, chain_index, entry)
                    if taken is not None:
                        return taken
                    held = _spooled_left(ctx, left)
                    if held is not None:
                        why = f"job {held.key!r} of batch {held.batch!r} {held.held}"
                        _never_sent(ctx, job, number, chain_index, entry, why)
                        _wait_for_holder(ctx, job, held)
                        return False
            ctx.report(job, "attempt", f"{entry['provider']}/{entry['model']} attempt {number}")
            stall_point("before_request")
            crash_point("after_attempt_row")
            report = {
                "chain_index": chain_index,
                "provider": entry["provider"],
                "model": entry["model"],
            }
            started = time.time()
            window = entry.get("window_s")
            # the job-style request this attempt polls, once its id is committed (a resumed
            # one's from the start): what a key refused on its polls leaves at the provider
            polled = [resume["provider_request_id"] if resume is not None else None]

            async def submitted(
                request_id: str, number: int = number, entry=entry, polled=polled
            ) -> None:
                stall_point("before_request_id")
                try:
                    ctx.ledger.record_request_id(job, number, entry["provider"], request_id)
                    # committed (and synced) before the job goes on; the submits that return
                    # together share one commit
                    await ctx.ledger.committed()
                except LedgerWriteError as exc:
                    # The provider accepted the request (it is paid for) and only this
                    # process knows its id. Given up here, its render was paid for again by
                    # the next run. So it is polled on to its end while the run stops (the
                    # ledger broke): its render goes to the spool like any call in flight's
                    # (``keep_rendered``), and the next run stores it without a new request.
                    try:  # and beside the spool, for the next run here if the grace runs out
                        await ctx.offload(
                            ctx.spool.note_request, job["id"], number, entry["provider"], request_id
                        )
                        noted = True
                    except OSError:
                        noted = False  # the run's last lines name the request (run.run_jobs)
                    ctx.unrecorded[job["id"]] = (job["key"], entry["provider"], request_id, noted)
                    if ctx.ledger_error is None:
                        ctx.ledger_error = exc
                    ctx.ledger_broke(exc)
                    return
                except Exception as exc:
                    raise _LedgerFailed() from exc  # the ledger's, not the adapter's
                crash_point("after_submit")
                polled[0] = request_id
                ctx.polling.add(job["id"])
                if ctx.stopping.is_set():
                    ctx.abandon_poll(job["id"])

            async def priced(cost: int, source: str, number: int = number, entry=entry) -> None:
                # a paid render's cost, known, while its output is fetched again in later
                # rounds (up to an hour): on its attempt now, as a budget holds it
                # (``hold_known_cost``), so a process killed meanwhile leaves it priced
                await _during_fetch(
                    ctx,
                    lambda: ctx.ledger.hold_known_cost(
                        job, number, entry["provider"], cost, source
                    ),
                )

            # the output URL a synchronous provider's paid answer named, committed before its
            # download (a stopped or killed run leaves it to the next run: ``_resumable``)
            left_url = [resume.get("answer_url")] if resume is not None else [None]

            async def answered(
                url: str,
                cost: int | None,
                request_id: str | None = None,
                *,
                usage: dict[str, Any] | None = None,
                number: int = number,
                entry=entry,
                left=left_url,
            ) -> None:
                if await _during_fetch(
                    ctx,
                    lambda: ctx.ledger.record_answer_url(
                        job, number, entry["provider"], url, cost, "derived", request_id, usage
                    ),
                ):
                    left[0] = url
                crash_point("after_answer_url")

            if resume is not None and not left_url[0]:
                ctx.polling.add(job["id"])  # its request id is known: it can be polled later
            attempt_request = AttemptRequest(
                job_id=job["id"],
                key=job["key"],
                prompt=request["prompt"],
                params=request["params"],
                provider=entry["provider"],
                model=entry["model"],
                attempt=number,
                rates=rates,
                on_submitted=submitted,
                on_ready=lambda job_id=job["id"]: ctx.result_ready(job_id),
                resume_id=resume["provider_request_id"] if resume else None,
                window_s=window,
                inputs=inputs or (),  # none when polling a resumed request
                stopping=ctx.stopping,
                idle=ctx.idle,
                ended=lambda: _ended_elsewhere(ctx, job),
                on_priced=priced,
                on_answer_url=answered if resume is None else None,
                scratch=str(ctx.spool.root),
                # (a resumed request is only polled: nothing paid is sent)
                last_look=(lambda at=looked: _last_look(ctx, job, at))
                if resume is None
                else no_look,
            )
            if resume is not None and left_url[0]:
                # a synchronous provider's paid render a stopped run left at its output URL:
                # fetched, nothing sent to the provider's API
                call = provider.fetch_left(
                    attempt_request,
                    left_url[0],
                    resume["cost_micros"],
                    resume["cost_source"],
                    age=ctx.ledger.clock() - resume["started_at"],
                    usage=json.loads(resume.get("usage_json") or "null"),
                )
            else:
                call = provider.render(attempt_request)
            # the call holds the request (and its inputs' bytes) while it runs, and no longer:
            # a name for it here kept a job's reference images in memory through its backoff
            # (tests/test_audit19a_gates.py)
            del attempt_request
            try:
                # a provider that enforces the window itself (Replicate's Cancel-After) gets a
                # little longer here, so its own answer (and cost) is the one recorded
                limit = window * 1.25 + 5 if window and provider.resumable else window
                call = asyncio.wait_for(call, limit) if limit else call
                # only a job-style request is ever left polling (``abandon_poll``): a call to a
                # synchronous provider is awaited here, without a task of its own
                try:
                    result = await (ctx.call(job["id"], call) if provider.resumable else call)
                finally:
                    if not asyncio.current_task().cancelling():  # its call came to an end
                        ctx.unrecorded.pop(job["id"], None)
                ctx.pace(entry["provider"]).answered()
            except PollAbandoned:
                # A stopping run leaves a submitted job-style request to the next run, which
                # polls it by id: nothing is paid twice, so there is no need to wait for it.
                # (Not a cancelled job's: no run polls it again, and its cost stays unknown.)
                current = ctx.ledger.job(job["id"])
                ctx.ledger.interrupt_attempt(
                    job,
                    number,
                    "afc stopped while the provider rendered it; the job was cancelled (the "
                    "provider was asked to stop it) and no run polls it again: its cost is "
                    "unknown"
                    if current is not None and current["status"] == "cancelled"
                    else None,
                )
                return False
            except TimeoutError:
                # The provider's own per-attempt window passed: it may have billed the whole
                # run, so the cost is unknown and this model is not tried again. A job-style
                # request left running is asked to stop (fal has no window of its own: it
                # would run on and be billed beside the next model's attempt).
                completed = None
                if provider.resumable and _ended_elsewhere(ctx, job) is None:
                    # (a job ended or taken over meanwhile: its request may be the one the
                    # new owner polls, and a cancel reached the provider already)
                    completed = await _cancel_left_request(
                        ctx, provider, job, number, entry["model"]
                    )
                if completed and (resume is None or resume["error_class"] != "window_expired"):
                    # It completed as the window ended (after the last poll, before the
                    # cancel): paid for, its result kept at the provider. Left so, the next
                    # model (or an 'afc retry') paid again for the one output; it is polled
                    # by its id instead (free), within one more window, as a request a dead
                    # run left is (``_resumable``). So is one the provider says ended
                    # otherwise (Replicate's failed or aborted): its end is recorded as it was.
                    # A request this run resumed (a dead run's) too; only the reading by id
                    # this makes is not made again when its own window ends (its row was
                    # left 'window_expired' here), so a provider that keeps saying "ended"
                    # and never answers it cannot loop. So is a fal request whose cancel fal
                    # did not take (a 5xx, no answer): nothing stopped it, it renders on and
                    # is billed, and the next model paid again for the one output
                    ctx.ledger.end_attempt(
                        job,
                        number,
                        **report,
                        status="unknown",
                        error_class="window_expired",
                        error_message=f"no result within the {window}s attempt window; "
                        f"{completed}: its result is read by its id",
                        started_at=started,
                    )
                    continue
                ctx.ledger.end_attempt(
                    job,
                    number,
                    **report,
                    status="failed",
                    error_class="window_expired",
                    # (read by its id once already: why it was, a cancel fal did not take
                    # again, so the request may render on, billed, is said)
                    error_message=f"no result within the {window}s attempt window"
                    + (f"; {completed}" if completed else ""),
                    started_at=started,
                )
                ctx.report(
                    job, "attempt_failed", f"window_expired on attempt {number}", cost_micros=None
                )
                continue
            except RequestGone as exc:
                # The provider no longer has the request we were to resume: it may have been
                # paid for, so the attempt stays on the books as unknown (its cost too, unless
                # the provider said what it ran: Replicate's seconds); a new one follows. A
                # request a run that ended left behind (``resume``) was lost by afc's own end,
                # not by an answer: ``interrupted``, it never uses up a model's attempts (an
                # ``attempts: 1`` job failed here, no new attempt made, on a resume after
                # a SIGKILL that came back once the provider had let its output go).
                _learn_cost(ctx, entry, rates, request["params"], exc.cost_micros, exc.usage)
                ctx.ledger.end_attempt(
                    job,
                    number,
                    **report,
                    status="unknown",
                    error_class=INTERRUPTED if resume is not None else None,
                    error_message=exc.message,
                    usage=exc.usage or None,
                    cost_micros=exc.cost_micros,
                    cost_source=exc.cost_source,
                    started_at=started,
                )
                ctx.report(
                    job,
                    "attempt_failed",
                    f"request gone on attempt {number}",
                    cost_micros=exc.cost_micros,  # Replicate's seconds: known, as recorded
                )
                continue
            except NeverSent as exc:
                _never_sent(ctx, job, number, chain_index, entry, exc.why)
                raise JobLost(job["id"]) from None
            except _LedgerFailed as exc:
                raise exc.__cause__ from None
            except OutputNotKept as exc:
                _learn_cost(ctx, entry, rates, request["params"], exc.cost_micros, exc.usage)
                paid = {
                    **report,
                    "status": "succeeded",
                    "provider_request_id": exc.request_id,
                    "usage": exc.usage or None,
                    "cost_micros": exc.cost_micros,
                    "cost_source": exc.cost_source,
                    "started_at": started,
                }
                raise _not_kept(ctx, job, number, paid, exc.message) from None
            except ProviderError as exc:
                _learn_cost(ctx, entry, rates, request["params"], exc.cost_micros, exc.usage)
                error_class, message = exc.error_class, exc.message
                if error_class == "rate_limited":
                    ctx.pace(entry["provider"]).throttled()
                if error_class == "auth" and provider.resumable and polled[0] is not None:
                    _key_lost_polling(ctx, job, number, report, started, exc, polled[0])
                    return False
                if error_class == "auth" and provider.refusal_holds_model:
                    # the model's other jobs wait for the next run (above)
                    ctx.refused.setdefault((entry["provider"], entry["model"]), message)
                if left_url[0] and getattr(exc, "stopped_run", False):
                    # afc stopped while the output was out of reach: its URL is committed, so
                    # the attempt is left to the next run, which fetches it for free while the
                    # provider keeps it (``_resumable``), at the cost known now (on the
                    # attempt since the URL's commit), which this run's summary and budget
                    # count: left as a stopped run leaves a job-style request
                    # (``interrupt_attempt``), the run that fetches it counts it no more
                    ctx.ledger.interrupt_attempt(
                        job,
                        number,
                        f"{exc.message}; the next run fetches it from the output URL its paid "
                        "answer named, paying nothing again",
                        request_id=exc.request_id,
                    )
                    continue
                ended = getattr(exc, "job_ended", None)
                if left_url[0] and ended:
                    # the job ended or moved elsewhere while the output was out of reach:
                    # 'afc cancel' (from any host), whose message says 'afc retry' stores the
                    # render without paying again, or a cancel and a retry while this run
                    # still fetched (past ops.STALE_CALL_S a retry takes the call to be over).
                    # Ended 'failed', the retry passed it over and paid for a new render;
                    # left as a stopped run leaves it (``interrupt_attempt``: its cost stays
                    # this run's; only while this process owns it, not once another reopened
                    # it), the run that goes on with the job fetches it from its URL while the
                    # provider keeps it (``Ledger._requeue``, ``_resumable``)
                    cancelled = ended == _ended_as("cancelled")
                    ctx.ledger.interrupt_attempt(
                        job,
                        number,
                        f"{exc.message}; "
                        + (
                            f"'afc retry {job['key']}' fetches it"
                            if cancelled
                            else "the run that goes on with the job fetches it"
                        )
                        + " from the output URL its paid answer named while the provider keeps "
                        "it, paying nothing again",
                        request_id=exc.request_id,
                    )
                    if not cancelled:
                        raise JobLost(job["id"]) from None
                    current = ctx.ledger.job(job["id"])
                    if current is not None:
                        job.update(status=current["status"])  # said 'ended cancelled'
                    return False
                if resume is not None and left_url[0]:
                    # the output a stopped run left at its URL is no longer served: a new
                    # render follows, paid again (``interrupted``: afc's stop lost it, so it
                    # uses up none of the model's attempts)
                    error_class = INTERRUPTED
                    message = (
                        f"{exc.message}: the output URL of this paid render, left by a run "
                        "that stopped before its download ended, no longer serves it; a new "
                        "render follows (paid again)"
                    )
                    _url_lost_said(
                        ctx,
                        job,
                        _left_url_named(number),
                        f"is no longer served ({exc.message})",
                    )
                elif (
                    resume is not None
                    and getattr(exc, "output_gone", False)
                    and resume["error_class"] != "window_expired"
                ):
                    # a job-style request a run that ended left, polled to its end here: its
                    # output's URL is refused for good (the provider let it go after its
                    # hour; a signed URL expired). afc's end lost it, as a request the
                    # provider no longer has (RequestGone): ``interrupted``, so it uses up
                    # none of the model's attempts, and a new request follows (an
                    # ``attempts: 1`` job failed here, or went on to the next model)
                    # (or its data removed: Replicate's ``data_removed``, fal's result
                    # deleted, paid at what it made). One read by its id after its own
                    # attempt window's cancel found it ended (its row left 'window_expired')
                    # was lost by no end of afc's: it keeps the provider's class, as when
                    # polled since its submit, and uses up an attempt (interrupted, each
                    # window's paid request would be followed by another, without end)
                    error_class = INTERRUPTED
                    message = (
                        f"{exc.message}: the output of this paid request, left by a run that "
                        "ended before it was fetched, is no longer served; a new request "
                        "follows (paid again)"
                    )
                    _url_lost_said(
                        ctx,
                        job,
                        f"the output of {entry['provider']} request "
                        f"{resume['provider_request_id']}, left by a run that ended before "
                        "it was fetched,",
                        f"is no longer served ({exc.message})",
                    )
                elif resume is not None and _stopped_by_retried_cancel(
                    ctx, job, resume, entry, exc
                ):
                    # afc's own cancel stopped it, and a person has retried the job since:
                    # not a cancel of the job, so not the end of its chain (``interrupted``:
                    # it uses up no attempt); a new request follows
                    error_class = INTERRUPTED
                    message = (
                        f"{exc.message}: stopped by an 'afc cancel' cut off before it recorded "
                        "so, which the job's retry took back; a new request follows"
                    )
                ctx.ledger.end_attempt(
                    job,
                    number,
                    **report,
                    status="failed",
                    error_class=error_class,
                    http_status=exc.http_status,
                    error_message=message,
                    provider_request_id=exc.request_id,
                    usage=exc.usage or None,
                    cost_micros=exc.cost_micros,
                    cost_source=exc.cost_source,
                    started_at=started,
                    retry_after_s=exc.retry_after,
                )
                ctx.report(
                    job,
                    "attempt_failed",
                    f"{exc.error_class} on attempt {number}",
                    cost_micros=exc.cost_micros,
                )
                continue
            except Exception as exc:  # noqa: BLE001 - recorded, then the run stops
                raise _answer_not_read(ctx, job, number, report, started, exc) from exc

        # The provider call is over: hand the bytes to the spool step (outside the render
        # slot, so the next render starts now) without touching the ledger's step. Its known
        # cost is what the budget holds from now on, not the estimate (the next render's
        # budget check may come before the spool step writes the attempt's end).
        job["rendered_by"] = {
            "provider": entry["provider"],
            "model": entry["model"],
            "attempt": number,
            "cost_micros": result.cost_micros,
            "cost_source": result.cost_source,
            "looked": looked,  # the job last known this run's (``_lost_since``)
        }
        job["unspooled"] = (
            result.data,
            {
                **report,
                "status": "succeeded",
                "provider_request_id": result.provider_request_id,
                "usage": result.usage,
                "cost_micros": result.cost_micros,
                "cost_source": result.cost_source,
                "started_at": started,
                "ended_at": time.time(),  # the call's end, not the spool's
            },
        )
        ctx.rendered[job["id"]] = job  # until the spool step takes the bytes (``keep_rendered``)
        # counted among the renders not yet spooled from here, and not again as landing: a
        # synchronous provider's call has no ``ctx.call`` to let go of it, and the job held its
        # room through its spool write and its store, its bytes already on the disk: with one
        # upload slow, the next render on a disk with room for it waited 'disk nearly full'
        ctx.landing.discard(job["id"])
        _named_as(ctx, job, entry, head_of(result.data))
        _learn_cost(ctx, entry, rates, request["params"], result.cost_micros, result.usage)
        if result.cost_micros is not None:
            # the attempt's cost, committed before the bytes go to the spool (``spool``): a
            # process ending during or after the spool write leaves the attempt at this cost,
            # and the run that adopts the spool file records it (unpriced without a budget
            # before: the cost died with the process, though the ledger could have held it)
            ctx.ledger.hold_known_cost(
                job, number, entry["provider"], result.cost_micros, result.cost_source
            )
        if result.cost_micros is not None and ctx.cap_micros is not None:
            # under a budget at once, holding the render slot: the budget's other workers
            # count this cost, not the estimate, from the group's next commit (shared)
            await ctx.ledger.committed()
        job["step"] = "spool"
        ctx.report(job, "rendered", f"attempt {number}", cost_micros=result.cost_micros)
        return True


async def _during_fetch(ctx: RunContext, write: Callable[[], None]) -> bool:
    """``write`` to the ledger for a paid render whose output is being fetched (its known
    cost, its output URL), awaiting the commit; True once committed. A write the ledger
    refuses stops the run (``ledger_broke``) while the fetch goes on, the render being paid
    for: its end keeps the bytes in the spool. Any other error is the ledger's, not the
    adapter's (``_LedgerFailed``)."""
    try:
        write()
        await ctx.ledger.committed()
    except LedgerWriteError as exc:
        if ctx.ledger_error is None:
            ctx.ledger_error = exc
        ctx.ledger_broke(exc)
        return False
    except Exception as exc:
        raise _LedgerFailed() from exc
    return True


def _named_as(ctx: RunContext, job: dict[str, Any], entry: dict[str, Any], head: bytes) -> None:
    """Say once a batch and model when a render's bytes are another image format than its
    output key names: the key's ``{ext}`` is ``params.output_format`` (default png), decided
    before the render, and a model may answer another (Replicate's flux answers WebP unless
    asked), so a batch of 10,000 ``.png`` keys held WebP with nothing said. The output is
    stored as named (its S3 Content-Type is what its bytes are: storage/s3.py)."""
    import mimetypes

    from afc_cli.inputs import image_type

    found = image_type(head[:32])
    named = mimetypes.guess_type(job["output_key"])[0]
    if found is None or named is None or found == named:
        return
    said = (job["batch"], entry["provider"], entry["model"], found, named)
    if said in ctx.formats_said:
        return
    ctx.formats_said.add(said)
    ctx.notice(
        f"{entry['provider']}/{entry['model']} answered {found} for {job['batch']}/{job['key']}, "
        f"stored under {job['output_key']} ({named}): set params.output_format to what the "
        "model makes (or ask it for the named format) so output keys name what they hold"
    )


def _last_look(ctx: RunContext, job: dict[str, Any], since: tuple[float, float]) -> None:
    """The last look before a paid request leaves (``AttemptRequest.last_look``, taken by
    the adapter with nothing awaited between it and the send): raises ``NeverSent`` when more than
    ``LEASE_RECHECK_S`` passed since the row was written (``since``, ``_awake_since``)
    and the job is no longer this run's: another process took it over while this one
    stalled past its lease (it marked this attempt unknown, and pays for the job itself), or
    it was cancelled (which left the attempt to this live run). The request has not left,
    so the attempt is known to have cost nothing (``_never_sent``; a row a takeover marked
    unknown keeps that status, its cost filled in).

    Still this run's, its lease is renewed in the same look (``Ledger.keep_lease``, a
    conditional write that a takeover's own conditional write excludes): a run that stalled
    past its lease found the job still its own, sent the request, and another process that
    took the job over in the moment before this run's heartbeat renewed the lease paid for it
    a second time.

    A run that begins stopping after the step's look still sends the request: the jobs whose
    attempt rows were committed before a signal go on to their calls, and are drained
    (afc_cli/run.py ``Interruption``)."""
    if _awake_since(since) > LEASE_RECHECK_S and not ctx.ledger.keep_lease(job["id"], ctx.lease_s):
        ended = _ended_elsewhere(ctx, job) or "was taken over by another afc process"
        raise NeverSent(f"the job {ended}")
    stall_point("after_last_look")


def _ended_elsewhere(ctx: RunContext, job: dict[str, Any]) -> str | None:
    """Why a job in its provider call is no longer this run's to finish (``afc cancel`` from
    another process, a takeover after this run stalled past its lease), or None."""
    current = ctx.ledger.job(job["id"])
    if current is None:
        return "is gone from the ledger"
    if current["status"] in TERMINAL:
        return _ended_as(current["status"])
    if current["lease_owner"] != ctx.ledger.owner:
        return "was taken over by another afc process"
    return None


def _ended_as(status: str) -> str:
    """How ``_ended_elsewhere`` names a job another process ended at ``status`` (a fetch's
    'not fetched further: the job is cancelled'), which ``render`` matches to tell a cancel
    from a takeover: one place builds the words both use."""
    return f"is {status}"


async def _stored_meanwhile(
    ctx: RunContext, job: dict[str, Any], number: int, chain_index: int, entry: dict[str, Any]
) -> bool | None:
    """Another job of this output key has stored an output under it (``Ledger._check_output``
    said so in this attempt's transaction, when no job of the key was rendering any more):
    look in storage before the request leaves. An object there ends this attempt unsent (at
    0) and the job as its probe would have ended it (another job's object: a conflict; this
    job's own: stored); none (deleted since) lets the request go. Returns what ``render``
    returns, or None to go on."""
    storage = ctx.storages[job["batch"]]
    try:
        info = await _storage(ctx, storage, storage.head, job["output_key"])
    except StorageError as exc:
        _never_sent(ctx, job, number, chain_index, entry, "its output key could not be looked up")
        return _storage_gave_up(ctx, job, "render", exc)
    if not info.exists:
        return None
    foreign = ownership(job, info)
    found = "another job stored its output key first" if foreign else "its output was stored"
    _never_sent(ctx, job, number, chain_index, entry, found)
    if foreign:
        await _fail_conflict(ctx, job, storage, info, foreign, "render")
        return False
    return await _found_stored(ctx, job, storage, info)


def _spooled_left(ctx: RunContext, left: Collection[tuple[str, str, str]]) -> OutputHeld | None:
    """Of the jobs of this job's output key whose run is gone at their render step
    (``Ledger._check_output``'s ``output_left``), one whose paid render is in this host's
    spool: its run died after the file landed, before the checkpoint saying so, and its next
    run adopts the file (``_adopt_spool``) and stores it. Rendered here too, one of the two
    paid renders was thrown away at its store (OUTPUT_KEY_CONFLICT). None when there is none
    (this job renders)."""
    for job_id, key, batch in left:
        if ctx.spool.path(job_id).exists():  # a stat, as the store step's
            return OutputHeld(
                batch,
                key,
                "whose paid render is spooled on this host and not stored yet",
                f"'afc resume --batch {batch}' stores it",
                job_id=job_id,
            )
    return None


async def _found_stored(
    ctx: RunContext, job: dict[str, Any], storage: Storage, info: ObjectInfo
) -> bool:
    """This job's own output found stored at its render step: on to verify, its last attempt
    adopted where the object's metadata names it (``_adopt_stored``), in one transaction.
    Its folder is made durable first, as at the probe and the store step: the run that linked
    the object there may have been killed before its own fsync of the folder, and a power cut
    after this run recorded the job left it succeeded with no file. Returns what ``render``
    returns (False: the fsync failed, the job waits at render)."""
    try:
        await _sync_dirs(ctx, storage, job["output_key"])
    except StorageError as exc:
        return _storage_gave_up(ctx, job, "render", exc)
    with ctx.ledger.tx():
        ctx.ledger.checkpoint(
            job,
            [("render", {"found": "own output"})],
            "verify",
            output_sha256=info.meta.get("sha256"),
            output_size=info.meta.get("size"),
        )
        _adopt_stored(ctx, job, info.meta)
    return True


def _never_sent(
    ctx: RunContext,
    job: dict[str, Any],
    number: int,
    chain_index: int,
    entry: dict[str, Any],
    why: str,
) -> None:
    """An attempt whose row was committed and whose request never left this machine: failed,
    ``interrupted``, at a known cost of 0 (source ``unsent``)."""
    ctx.ledger.end_attempt(
        job,
        number,
        chain_index=chain_index,
        provider=entry["provider"],
        model=entry["model"],
        status="failed",
        error_class=INTERRUPTED,
        error_message=f"never sent: {why}",
        cost_micros=0,
        cost_source="unsent",
    )


class _LedgerFailed(Exception):
    """Wraps a ledger failure met inside a provider call (recording a request id), so the
    call's handler re-raises it as it is rather than take it for an answer not read."""


def _answer_not_read(
    ctx: RunContext,
    job: dict[str, Any],
    number: int,
    report: dict[str, Any],
    started: float,
    exc: Exception,
) -> AnswerNotRead:
    """A provider call raised something other than a ``ProviderError``: the adapter could not
    read the answer (adapters read answers as untrusted input, so this is a bug in afc or an
    API that changed). The attempt is recorded failed, ``server``, its cost unknown (the
    render may have happened), and the run stops as at a first signal (``StopsRun``): the
    calls in flight are let finish and recorded, and no more are paid for answers that the
    same fault may leave unread. The job stays resumable."""
    what = f"{exc.__class__.__name__}: {exc}"[:300]
    ctx.ledger.end_attempt(
        job,
        number,
        **report,
        status="failed",
        error_class="server",
        error_message=visible(
            scrub(f"{report['provider']}: afc could not read the answer ({what})")
        ),
        started_at=started,
    )
    ctx.report(job, "attempt_failed", f"answer not read on attempt {number}", cost_micros=None)
    return AnswerNotRead(
        f"{report['provider']}'s answer to {job['batch']}/{job['key']} (attempt {number}) could "
        f"not be read ({what}). The attempt is recorded failed with its cost unknown. The run "
        "stopped so that no more calls are paid for answers afc may not read: the calls in "
        f"flight were let finish and recorded. This is a bug in afc's {report['provider']} "
        "adapter or a change in the provider's API; please report it. The job stays "
        "resumable ('afc resume')."
    )


async def spool(ctx: RunContext, job: dict[str, Any]) -> bool:
    """Make a render's bytes durable, then record the attempt and both checkpoints at once."""
    if "unspooled" not in job:
        ctx.rendered.pop(job["id"], None)
        # Not a step the ledger rests at (render checkpoints straight to store); were a job
        # found here, the next run's render step decides (adopt the spool file, or retry)
        # under a render slot.
        job["step"] = "render"
        return False
    if job["rendered_by"]["cost_micros"] is not None:
        # the known cost the render step wrote on the attempt is committed before the spool
        # file is (the group's next commit, shared, in 5 ms at most): a crash after the
        # rename leaves the attempt at its cost for the run that adopts the file. A commit
        # that fails (a full disk, a lost connection) finds the bytes still among the
        # renders not yet spooled, which the run's stop writes to the spool
        # (``keep_rendered``): taken out before it, every render in flight as the ledger
        # broke was dropped here, and paid for again by the next run
        await ctx.ledger.committed()
    data, success = job.pop("unspooled")
    ctx.rendered.pop(job["id"], None)
    number = job["rendered_by"]["attempt"]
    ctx.largest_output = max(ctx.largest_output, len(data))
    late = _lost_since(ctx, job, job["rendered_by"].get("looked"))
    try:
        spooled = await _spool_write(ctx, job["id"], data, sync_dir=False, late=late)
        del data
        await ctx.dirs.sync(ctx.spool.root)  # the rename is durable: shared with other jobs
    except (OSError, SpoolError) as exc:
        try:
            error = _not_kept(ctx, job, number, success, exc)
        except LedgerWriteError:
            ctx.unkept.append(f"{job['batch']}/{job['key']}")  # nor could it be recorded
            raise
        raise error from None
    crash_point("after_spool")
    try:
        if late:  # its own name kept for the process that holds the job (``_lost_since``)
            raise JobLost(job["id"])
        with ctx.ledger.tx():
            ctx.ledger.checkpoint(
                job,
                [
                    (
                        "render",
                        {k: job["rendered_by"][k] for k in ("provider", "model", "attempt")},
                    ),
                    ("spool", _spooled_detail(ctx, spooled)),
                ],
                "store",
                outcome="rendered",
                output_sha256=spooled.sha256,
                output_size=spooled.size,
            )
            ctx.ledger.report_attempt(job, number, **success)
    except LedgerWriteError:
        ctx.kept.append((job, spooled))  # in the spool, beside its attempt row (``keep_rendered``)
        raise
    except JobLost:
        # The job ended meanwhile (cancelled) or was taken over (found so before its spool
        # write too, ``_lost_since``): its state stays as it is, but
        # this attempt was paid, so its outcome and cost are recorded, and its output is kept
        # (stored by ``run_job`` once this spool slot is free: an upload must not hold one).
        ctx.ledger.end_attempt(job, number, **success)
        ctx.late_results[job["id"]] = (job, spooled)
        raise
    return True


def _lost_since(ctx: RunContext, job: dict[str, Any], since: tuple[float, float] | None) -> bool:
    """Before a render's bytes go to the spool under the job's name: True when more than
    ``LEASE_RECHECK_S`` passed since the job was last known this run's (``since``, its
    attempt row or its resumed request's reopening) and it is no longer: a process stalled
    past its lease (SIGSTOP, a paused VM) while the provider rendered, its job taken over
    (or ended) meanwhile. Its late render is then written under a name of its own
    (``Spool.write`` ``late``): written under the job's, it replaced the spool file of the
    process that took the job over, between that one's spool write and its store, which found
    the file "damaged" and dead-lettered the job SPOOL_DAMAGED (or stored the other render
    under its checkpoint's SHA-256), both renders paid for. Still this run's, the lease is
    renewed in the same look (``Ledger.keep_lease``), as before a paid request
    (``_last_look``): no takeover before the spool step's checkpoint. A ledger that cannot
    be written says nothing here: the checkpoint meets it, the bytes spooled."""
    if since is None or _awake_since(since) <= LEASE_RECHECK_S:
        return False
    try:
        return not ctx.ledger.keep_lease(job["id"], ctx.lease_s)
    except LedgerWriteError:
        return False


def _not_kept(
    ctx: RunContext, job: dict[str, Any], number: int, success: dict[str, Any], exc: object
) -> SpoolError:
    """The bytes of a paid render cannot be kept here (a full disk, say: its spool write
    failed, or its download's spill to the spool's folder, ``OutputNotKept``): record the
    paid attempt; the caller stops the run with the error returned, since every other render
    would land on the same disk. A job-style provider's request (its id committed) still
    holds the output for a while (Replicate an hour, fal minutes): the attempt is left to the
    next run, which polls that request and fetches its output again for free
    (``_resumable``), at the cost known now, rather than paying for a new render as a
    synchronous provider's must."""
    request_id = success.get("provider_request_id")
    provider = ctx.providers.get(success["provider"])
    left = request_id is not None and provider is not None and provider.resumable
    # a synchronous provider's output URL, committed before its download (``answered``):
    # the next run fetches it again while the provider keeps it, as a request of Replicate's
    answer_url = not left and any(
        row["number"] == number and row.get("answer_url") for row in ctx.ledger.attempts(job["id"])
    )
    if left or answer_url:
        source = (
            f"the output URL {success['provider']}'s paid answer named"
            if answer_url
            else f"request {request_id}"
        )
        success = {
            **success,
            "status": "unknown",
            "error_class": INTERRUPTED,
            "error_message": f"its output could not be kept in the spool ({exc}); the "
            f"next run fetches it again from {source}",
        }
    ctx.ledger.end_attempt(job, number, **success)
    if left or answer_url:
        # the job holds its output key while that render waits at the provider, as one a
        # stopped run left does (its attempt's end put it back to ``running``, which the
        # run's stop made ``queued``: another job of the key then paid for it and stored it)
        ctx.ledger.still_rendering(job, success["provider"], request_id, at_url=answer_url)
    ctx.ledger.note(job, "spool_failed", error=str(exc))
    again = (
        f"the next run fetches it again from {success['provider']} request {request_id} "
        "while the provider keeps it, paying nothing again"
        if left
        else "the next run fetches it again from the output URL its answer named while "
        f"{success['provider']} keeps it, paying nothing again"
        if answer_url
        else "the job renders again"
    )
    return SpoolError(
        f"cannot keep the output of {job['batch']}/{job['key']} in the spool "
        f"{ctx.spool.root}: {exc}. Its render (attempt {number}) is recorded with its "
        f"cost; fix the disk, then run 'afc resume' ({again}).",
        job=f"{job['batch']}/{job['key']}",
    )


async def _spool_write(ctx: RunContext, job_id: str, data: Output, **kw: Any) -> SpoolFile:
    """``Spool.write`` of a render's bytes: in the file helper process (``ctx.offload``) when
    they are few, else in a thread of this one (a large output is not copied through a pipe;
    one spilled to a file, ``Spilled``, cannot be). A spilled file is closed after."""
    try:
        small = isinstance(data, bytes) and len(data) <= OFFLOAD_SPOOL_BYTES
        run = ctx.offload if small else asyncio.to_thread
        return await run(ctx.spool.write, job_id, data, **kw)
    finally:
        if isinstance(data, Spilled):
            data.close()


async def keep_rendered(ctx: RunContext) -> int:
    """Write to the spool the paid renders still in memory (``RunContext.rendered``) when the
    ledger broke under the run (a full disk, a lost PostgreSQL connection, a write lock held
    past the busy timeout): their spool steps cannot record them, but a spool file beside a
    committed attempt row is what a crash between the spool write and its checkpoint leaves,
    and the next run on this host adopts it (``_adopt_spool``: stored, its cost unknown)
    instead of paying for the render again. Returns how many renders are kept so, these and
    the ones whose spool step wrote the file and then met the broken ledger; one that cannot
    be written (the disk is the one that failed) is left, as before, to be rendered again,
    and named in ``ctx.unkept``: the run's stop said only how many were kept, and a user read
    every paid render as safe while the next run paid for these again."""
    for job_id, job in list(ctx.rendered.items()):
        pending = job.pop("unspooled", None)
        ctx.rendered.pop(job_id, None)
        if pending is None:
            continue
        try:
            spooled = await _spool_write(ctx, job_id, pending[0])
        except (OSError, SpoolError):
            ctx.unkept.append(f"{job['batch']}/{job['key']}")
            continue
        ctx.kept.append((job, spooled))
    for job, spooled in ctx.kept:  # kept beyond this run, beside a ledger that broke
        _describe(ctx, job, spooled.size, spooled.sha256, job.get("rendered_by") or {})
    return len(ctx.kept)


async def store_kept(ctx: RunContext, timeout: float) -> int:
    """Store the renders ``keep_rendered`` kept in the spool under their output keys, as a
    late result is (``_put_own``: create-only, tagged as the job's own with its attempt and
    cost), within ``timeout`` seconds in all. The storage still works when the ledger does
    not: stored, a render is found by the next run of its job on any host (its probe adopts
    it, at the cost its metadata names), where a spool file helps only this host's next run,
    and another host that takes the job over once its lease ran out paid for it again.
    Returns how many were stored; the rest stay in the spool, as before."""
    stored = 0

    async def put_each() -> None:
        nonlocal stored
        for job, spooled in ctx.kept:
            try:
                await _put_own(ctx, job, spooled)
            except (ObjectExists, StorageError, OSError):
                continue
            stored += 1

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(put_each(), timeout)
    return stored


async def _put_own(ctx: RunContext, job: dict[str, Any], spooled: SpoolFile) -> None:
    """Store a spooled render under its job's output key, create-only and tagged as the job's
    own (as the store step does), without the ledger: raises ObjectExists or StorageError."""
    storage = ctx.storages[job["batch"]]
    key = job["output_key"]
    meta = _object_meta(ctx, {**job, "output_sha256": spooled.sha256, "output_size": spooled.size})
    await _storage(
        ctx, storage, storage.put_if_absent, key, spooled.path, meta, inline=False, write=True
    )
    await _sync_dirs(ctx, storage, key)


async def _keep_late_result(ctx: RunContext, job: dict[str, Any], spooled: SpoolFile) -> None:
    """A paid render that arrived after its job ended here (cancelled, or taken over by
    another process): stored under the job's output key, create-only and tagged as the job's
    own (``_put_own``), so that the probe of any later run of the job, on any host (after
    ``afc retry``), finds it and pays for nothing. A spool file at the job's own name stays too
    (removed once the job's output is stored and verified, ``sweep_spool``; another run of the
    job on this host may be using that path): where the output cannot be stored (the key is
    taken, the storage fails), it is what a retry run on this host uses. One at its own name
    (``.late``) is removed once its object reads back whole (``_drop_stored_late``). No job
    state is written: the job's ending stands."""
    try:
        await _put_own(ctx, job, spooled)
    except (ObjectExists, StorageError) as exc:
        path = spooled.path
        if path == ctx.spool.late_path(job["id"]):  # (``_lost_since``)
            try:
                path = await ctx.offload(ctx.spool.settle_late, job["id"], path)
            except OSError:
                pass
        if path == ctx.spool.path(job["id"]):  # the job's own name: what its record describes
            _describe(ctx, job, spooled.size, spooled.sha256, job.get("rendered_by") or {})
        ctx.ledger.note(job, "late_result_kept", spool=str(path), not_stored=str(exc))
        return
    storage = ctx.storages[job["batch"]]
    kept = not await _drop_stored_late(ctx, job, spooled)
    ctx.ledger.note(
        job,
        "late_result_stored",
        url=storage.describe(job["output_key"]),
        spool=str(spooled.path) if kept else None,
    )


async def _drop_stored_late(ctx: RunContext, job: dict[str, Any], spooled: SpoolFile) -> bool:
    """Remove a late render's ``.late`` file (``_lost_since``) once its object reads back
    whole under the job's output key; True when removed. A run reads a ``.late`` file only
    where the job has no ``.spool`` (``Spool.find_late``) and ``sweep_spool`` removes a
    job's files only once the job's own output is verified, which a job left cancelled never
    is: every late render of a cancelled job stayed in the spool for good after being
    stored, a video's gigabytes each on a worker storing to S3, until the spool's disk was
    too full for any render to start (``_disk_low``). A file at the job's own name is left,
    as before: a run of the job retried meanwhile on this host may be using it."""
    if spooled.path != ctx.spool.late_path(job["id"]):
        return False
    storage = ctx.storages[job["batch"]]
    try:
        problem = await _storage(
            ctx,
            storage,
            storage.verify,
            job["output_key"],
            spooled.size,
            spooled.sha256,
            spooled.path,
            inline=spooled.size <= INLINE_READ_BYTES,
        )
        if problem is None:
            await ctx.offload(ctx.spool.drop_late, job["id"], spooled.sha256)
    except (StorageError, OSError):
        return False
    return problem is None


def _disk_low(ctx: RunContext, job: dict[str, Any]) -> bool:
    """Before paying for a render: is there room on this machine for its bytes? A render whose
    output cannot be spooled is paid for and lost; so when the spool's disk (the ledger's too)
    is nearly full, no new render starts, the job waits with the reason, and the run ends
    with exit 1. Renders already in flight keep the room they need: beyond the margin
    (``min_free_bytes``), each call in flight or render not yet spooled, and this one, is
    counted at the largest output the run has spooled or its batches had stored. Against the
    margin alone, a hundred calls of 3 MB images started at 65 MiB free landed 300 MB on it:
    those past the room were paid for and lost (a synchronous provider's rendered again, paid
    twice)."""
    if not ctx.min_free_bytes:
        return False
    free = ctx.spool.free_bytes()
    where = f"rendered bytes are kept ({ctx.spool.root})"
    return _too_full(ctx, job, free, where, "disk nearly full")


def _too_full(ctx: RunContext, job: dict[str, Any], free: int, where: str, said: str) -> bool:
    """Whether ``free`` bytes (``where``: the disk's role and folder) leave no room for this
    render beside the margin and the renders in flight; then the job waits, saying so."""
    ahead = len(ctx.calls) + len(ctx.landing) - (job["id"] in ctx.landing) + len(ctx.rendered)
    landing = (ahead + 1) * ctx.largest_output
    if free >= ctx.min_free_bytes + landing:
        ctx.landing.add(job["id"])
        return False
    mib = 1024 * 1024
    beside = (
        f" and the {landing / mib:.2f} MiB the renders in flight and this one may bring"
        if landing
        else ""
    )
    ctx.ledger.set_waiting(
        job,
        f"disk: {free / mib:.1f} MiB free where {where}, under the "
        f"{ctx.min_free_bytes / mib:.1f} MiB afc keeps free (AFC_MIN_FREE_MB){beside}; no "
        "render was started. Free space, then run 'afc resume'",
    )
    ctx.report(job, "waiting", said)
    return True


async def _storage_low(ctx: RunContext, job: dict[str, Any]) -> bool:
    """Before paying for a render: is there room for its output where it is stored? A file
    storage folder on a disk of its own (an external drive, a NAS share) is held to the
    spool's margin (``_disk_low``): with that disk full, every job was rendered and paid for
    and each one's store then failed 'No space left on device' (the folder is writable, so
    the storage check a failed store brings, ``_storage_broke``, passed), the renders piling
    up in the spool. No new render starts; the job waits with the reason, as for the spool.
    A folder on the spool's own disk is ``_disk_low``'s (its object a hard link of the spool
    file), found so once a run (``RunContext.spool_disk``): the look is a round trip to the
    file helper, and it was made before every job of a fresh run; a disk that cannot be
    looked at is the store's to report."""
    storage = ctx.storages[job["batch"]]
    room = getattr(storage, "room", None)
    if not ctx.min_free_bytes or room is None or storage.url in ctx.spool_disk:
        return False
    try:
        device, free = await _io(ctx, storage, room)
        if device == os.stat(ctx.spool.root).st_dev:
            ctx.spool_disk.add(storage.url)
            return False
    except OSError:
        return False
    where = f"outputs are stored ({storage.root})"
    return _too_full(ctx, job, free, where, "storage disk nearly full")


async def _cancel_left_request(
    ctx: RunContext, provider: Any, job: dict[str, Any], number: int, model: str
) -> str | None:
    """Ask a job-style provider to stop the request an attempt leaves behind (its id as the
    ledger recorded it); best effort, at most ``CANCEL_WAIT_S``. Why its result is read by
    its id (``stop_left``: the provider answered that the request had completed already, or
    fal did not take the cancel); else None, and the attempt's cost stays unknown."""
    found = [a for a in ctx.ledger.attempts(job["id"]) if a["number"] == number]
    request_id = found[0]["provider_request_id"] if found else None
    if not request_id:
        return None
    try:
        return await asyncio.wait_for(provider.stop_left(request_id, model), CANCEL_WAIT_S)
    except Exception:  # noqa: BLE001 - best effort: the attempt is recorded either way
        return None


CANCEL_WAIT_S = 10.0


async def _read_inputs(ctx: RunContext, job: dict[str, Any]) -> tuple | None:
    """The job's input images, or None once the job has been failed (an input changed or
    gone) or left waiting (a need's output could not be read from storage)."""
    from afc_cli.inputs import InputProblem, SharedReads, needed_outputs, read_inputs

    # where the job's row names its files now, not where the claim found them: a re-submit
    # naming a file's new place (``Ledger._refile_inputs``) while this run held the job
    # (between attempts) left it reading the old place, gone, and failing the job
    current = ctx.ledger.job(job["id"])
    if current is not None:
        job["inputs_json"] = current["inputs_json"]
    try:
        outputs = needed_outputs(job, ctx.ledger)
        if ctx.shared_inputs is None:
            ctx.shared_inputs = SharedReads()
        return await ctx.network(read_inputs, job, outputs, ctx.storages, ctx.shared_inputs)
    except StorageError as exc:
        _storage_gave_up(ctx, job, "render", exc)
    except InputProblem as exc:
        ctx.ledger.finish(
            job,
            "failed",
            step="render",
            outcome="failed",
            error_code="INPUT_UNAVAILABLE",
            error_class="invalid",
            error_message=str(exc),
        )
    return None


def _key_lost_polling(
    ctx: RunContext,
    job: dict[str, Any],
    number: int,
    report: dict[str, Any],
    started: float,
    exc: ProviderError,
    request_id: str,
) -> None:
    """A job-style request the provider accepted, whose polls (or result) it then refused
    for the key (401, 403: revoked or rotated mid-render). The request renders on, billed,
    its result kept at the provider by its id. ``auth`` stops the chain, as ever; but the
    attempt is left ``unknown`` with its request id, as a run that ended leaves one
    (``_resumable``), not ``failed``: 'afc retry' once a working key is in place then polls
    that request for nothing, where it submitted, and paid for, a new one. Not polled again
    in this run: the key it has is refused."""
    from afc_cli.attempts import PastAttempt

    message = (
        f"{exc.message}; {report['provider']} request {request_id} may render on (billed): "
        f"'afc retry {job['key']}' polls it by its id once the key works, paying nothing again"
    )
    ctx.ledger.end_attempt(
        job,
        number,
        **report,
        status="unknown",
        error_class=exc.error_class,
        http_status=exc.http_status,
        error_message=message,
        provider_request_id=request_id,
        usage=exc.usage or None,
        cost_micros=exc.cost_micros,
        cost_source=exc.cost_source,
        started_at=started,
    )
    ctx.report(job, "attempt_failed", f"{exc.error_class} on attempt {number}", cost_micros=None)
    cause = PastAttempt(
        chain_index=report["chain_index"],
        status="unknown",
        error_class=exc.error_class,
        provider=report["provider"],
        model=report["model"],
        http_status=exc.http_status,
        message=message,
    )
    _chain_over(ctx, job, GiveUp(cause, f"{exc.error_class} stops the chain"))


def _chain_over(ctx: RunContext, job: dict[str, Any], decision: GiveUp) -> None:
    """Fail a job whose chain ``next_try`` found over (``CHAIN_FAILED``), nothing called."""
    cause = decision.cause
    ended = ctx.ledger.finish(
        job,
        "failed",
        step="render",
        outcome="failed",
        error_code="CHAIN_FAILED",
        error_class=cause.effective_class,
        error_provider=f"{cause.provider}/{cause.model}",
        error_http_status=cause.http_status,
        error_message=f"{describe_cause(cause)} ({decision.reason})",
    )
    if not ended:  # another process ended it first (this one lost its lease)
        raise JobLost(job["id"])


def _noted_request(
    ctx: RunContext, job: dict[str, Any], rows: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The job's attempts, the last one given the request id a run kept beside the spool when
    the ledger could not record it (``Spool.note_request``: the ledger broke as the provider
    accepted the request, and the request outlasted that run's grace period). Recorded, it is
    polled like any request a dead run left (``_resumable``), not paid for again."""
    last = rows[-1] if rows else None
    if last is None or last["status"] != "unknown" or last["provider_request_id"]:
        return rows
    provider = ctx.providers.get(last["provider"])
    if provider is None or not provider.resumable:
        return rows  # only a job-style submit's id is ever kept (``render``'s ``submitted``)
    noted = ctx.spool.noted_request(job["id"])
    if (
        noted is None
        or noted.get("attempt") != last["number"]
        or noted.get("provider") != last["provider"]
    ):
        return rows
    request_id = noted["request_id"]
    with ctx.ledger.tx():
        ctx.ledger.record_request_id(job, last["number"], last["provider"], request_id)
        ctx.ledger.note(job, "request_id_recovered", attempt=last["number"], from_spool=True)
    return [*rows[:-1], {**last, "provider_request_id": scrub(request_id)}]


def _stopped_by_retried_cancel(
    ctx: RunContext,
    job: dict[str, Any],
    resume: dict[str, Any],
    entry: dict[str, Any],
    exc: ProviderError,
) -> bool:
    """Whether a request a retry left this run to poll (``resume``) was answered
    ``cancelled`` because 'afc cancel' asked the provider to stop it, then died (SIGKILL, a
    power cut) before it recorded the provider's answer: the ledger saw no cancel reach the
    provider, so the retry polls the request (``Ledger._cancel_left_polling``: a cancel cut
    off before its request leaves the render going, paid), and the poll meets the cancel's
    own effect. Failing the job for it (``cancelled`` stops the chain) failed a job the
    person had just retried. So it is the attempt the retry left (numbered just past its
    base) of a job whose latest retry took back a cancel. With an attempt window, a
    cancelled Replicate prediction reads as the window's end (``window_expired``: its
    Cancel-After deadline cancels it too); before the window has passed it can only be the
    cancel's."""
    if resume["number"] != job["attempt_base"] + 1:
        return False
    if exc.error_class == "window_expired":
        window = entry.get("window_s")
        if not window or ctx.ledger.clock() - resume["started_at"] >= window:
            return False
    elif exc.error_class != "cancelled":
        return False
    retries = [e for e in ctx.ledger.events(job["id"]) if e["kind"] == "retried"]
    if not retries:
        return False
    detail = json.loads(retries[-1]["detail_json"] or "{}")
    return detail.get("previous_status") == "cancelled"


def _resumable(ctx: RunContext, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The job's last attempt, if a dead run left it submitted to a provider that can be
    polled by id (and it was not already found gone), or left a synchronous provider's paid
    render at the output URL its answer named (``Ledger.record_answer_url``), however long
    ago: fetching it is free, and only the provider can say it let the output go (a 403 or
    404 then fails the attempt and a new render follows). Taken as lost once older than
    ``keeps_outputs_s``, a URL still served (a gateway that keeps its outputs a day, a
    resume a little past the hour, a clock stepped forward) was paid for again unasked."""
    if not rows:
        return None
    last = rows[-1]
    provider = ctx.providers.get(last["provider"])
    if (
        last["status"] == "unknown"
        and last["provider_request_id"]
        and provider is not None
        and provider.resumable
        and not (last["error_message"] or "").startswith(GONE_PREFIX)
    ):
        return last
    if (
        # a synchronous provider's paid render whose output URL was committed before its
        # download, which the run did not end (killed, stopped, a full disk): fetched from
        # that URL for free while the provider keeps it (``HttpProvider.fetch_left``)
        last["status"] == "unknown"
        and last.get("answer_url")
        and provider is not None
        and not provider.resumable
    ):
        return last
    return None


def _left_url_named(number: int) -> str:
    """The paid render a run that ended left at its output URL, as ``_url_lost_said`` names
    it (attempt ``number``)."""
    return (
        f"the output URL its paid render (attempt {number}) was left at, by a run that ended "
        "before its download did,"
    )


def _url_lost_said(ctx: RunContext, job: dict[str, Any], what: str, why: str) -> None:
    """Said once a run: a paid render a run that ended left (``what``) whose output can no
    longer be fetched (``why``), paid for again: a URL that answered 403/404, or a job-style
    request's output that did."""
    if ctx.url_lost_said:
        return
    ctx.url_lost_said = True
    ctx.notice(
        f"{job['batch']}/{job['key']}: {what} {why}: the render is paid for again (so is any "
        "other such job of this run; 'afc show KEY' says so on its attempt)"
    )


def _adopt_spool(
    ctx: RunContext, job: dict[str, Any], spooled: SpoolFile, about: dict[str, Any]
) -> None:
    """A spool file landed but its checkpoint did not (a crash in between): use it.

    The attempt that produced it (``_spool_producer``) becomes ``succeeded``. Its usage was
    lost with the process; its cost, where the answer made it known, was recorded before the
    spool file (``Ledger.hold_known_cost``, committed before ``spool`` writes) or in the
    file's ``.about`` record (``about``, which ``render`` reads off the event loop: a run whose
    ledger broke), else it stays unpriced (an answer of unknown cost, or a file a run of an
    earlier afc left), never claiming more than is known.
    """
    attempts = ctx.ledger.attempts(job["id"])
    last = _spool_producer(attempts, about)
    cost = about.get("cost_micros") if last is not None and last["cost_micros"] is None else None
    cost = cost if isinstance(cost, int) and not isinstance(cost, bool) and cost >= 0 else None
    with ctx.ledger.tx():
        detail = {"adopted": True, "attempt": last["number"] if last else None}
        ctx.ledger.checkpoint(
            job,
            [("render", detail), ("spool", _spooled_detail(ctx, spooled))],
            "store",
            outcome="rendered",
            output_sha256=spooled.sha256,
            output_size=spooled.size,
        )
        if last is not None and last["status"] in ("started", "unknown"):
            known = last["cost_micros"] is not None or cost is not None
            ctx.ledger.adopt_attempt(
                last["id"],
                "adopted from the spool after the process ended; usage "
                + ("unknown" if known else "and cost unknown"),
                cost_micros=cost,
                cost_source=_about_source(about) if cost is not None else None,
            )


def _paid_render(
    ctx: RunContext, job: dict[str, Any], about: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The ``.about`` record of this job's spool file (``Spool.about_of``) when it describes
    the render this job last paid for and no later one: this request, an attempt still of
    unknown outcome (``started`` or ``unknown``) and the last such, with a size and SHA-256.
    The file found beside it holds other bytes (``record_of`` refused it): a disk error or a
    truncation since its run kept it there as its ledger broke. Adopted as found, those bytes
    were checkpointed as the render, stored and verified against themselves: the job
    succeeded with a damaged output. Checkpointed with the record's size and SHA-256 instead,
    the store step finds the file damaged (``spool.damage``), as it finds any file its
    checkpoint does not describe: nothing stored, the file set aside, ``SPOOL_DAMAGED``
    (or, when the render was stored already, verify reads that object back). A record of
    another request or of an earlier attempt is stale, not evidence of damage: None."""
    if not about or about.get("request_hash") != job["request_hash"]:
        return None
    size, sha = about.get("size"), about.get("sha256")
    if not isinstance(size, int) or isinstance(size, bool) or not isinstance(sha, str):
        return None
    live = [a for a in ctx.ledger.attempts(job["id"]) if a["status"] in ("started", "unknown")]
    if not live or (live[-1]["number"], live[-1]["provider"]) != (
        about.get("attempt"),
        about.get("provider"),
    ):
        return None
    return about


def _as_checkpointed(ctx: RunContext, job: dict[str, Any], found: SpoolFile) -> SpoolFile:
    """``found``, the spool file a retried job's render step adopts, as its spool checkpoint
    recorded it when that checkpoint describes the one render the file can hold: the job's
    row still carries that checkpoint's size and SHA-256 (no output found in storage put
    others there) and the attempt it names is the job's last that may have made a file,
    succeeded (a later one, started, unknown or a late result, may have written the file
    since, unrecorded). A job failed at its store or verify step with its render kept in the
    spool (OUTPUT_KEY_CONFLICT, VERIFY_FAILED), retried once the key was free, starts at its
    probe and comes here: adopted as found, a file damaged while the job waited (a bit
    flipped, a truncation, another process writing in place) was stored as the job's output,
    read back against itself, and the job succeeded with those bytes. Adopted with the
    checkpoint's size and SHA-256, the store step finds it damaged (``spool.damage``:
    nothing stored, the file set aside, ``SPOOL_DAMAGED``), as it finds any file its
    checkpoint does not describe. ``found`` itself otherwise."""
    size, sha256 = job.get("output_size"), job.get("output_sha256")
    if size is None or not sha256 or (found.size, found.sha256) == (size, sha256):
        return found
    details = {
        row["step"]: json.loads(row["detail_json"] or "{}")
        for row in ctx.ledger.steps(job["id"])
        if row["step"] in ("render", "spool")
    }
    spooled, rendered = details.get("spool") or {}, details.get("render") or {}
    if (spooled.get("size"), spooled.get("sha256")) != (size, sha256):
        return found  # the row's values are another output's (one found stored)
    made = [
        a
        for a in ctx.ledger.attempts(job["id"])
        if a["status"] in ("succeeded", "started", "unknown")
    ]
    if not made or made[-1]["status"] != "succeeded":
        return found
    if made[-1]["number"] != rendered.get("attempt"):
        return found
    return SpoolFile(found.path, size, sha256)


def _about_source(about: dict[str, Any]) -> str:
    """How an ``.about`` record's cost was known (as the attempt said), else derived."""
    source = about.get("cost_source")
    return source if source in ("derived", "reported", "local") else "derived"


def _spool_producer(attempts: list[dict[str, Any]], about: dict[str, Any]) -> dict[str, Any] | None:
    """Which of a job's attempts made its spool file: the one its ``.about`` record names (a
    run left it there knowingly: its ledger broke, its store failed), else the last that may
    have rendered (``started`` or ``unknown``): a later attempt that failed made no file. A
    host frozen mid-call past its lease woke to its answer and spooled it as its ledger
    connection was lost, while another process that took the job over had started an
    attempt it never sent (it was stopping); the next run here adopted the file for that
    later, failed attempt, and the job succeeded 'rendered' by no attempt, the paying one
    left unknown (bench/chaos.py --postgres, seed 59). Else the last attempt, as before."""
    live = [a for a in attempts if a["status"] in ("started", "unknown")]
    named = [
        a
        for a in live
        if a["number"] == about.get("attempt") and a["provider"] == about.get("provider")
    ]
    if named:
        return named[0]
    if live:
        return live[-1]
    return attempts[-1] if attempts else None


def _adopt_left(
    ctx: RunContext, job: dict[str, Any], spooled: SpoolFile, about: dict[str, Any]
) -> None:
    """A render of this very request in the spool that no attempt of the ledger made: an
    earlier ledger's (deleted, or made anew, while the render waited here for its store).
    Rendering again paid for it twice and overwrote the paid file. It is stored instead,
    tagged with the attempt and cost its ``.about`` record names, and counted as a render
    avoided at that cost, as the probe counts an output a lost ledger left stored."""
    cost = about.get("cost_micros")
    cost = cost if isinstance(cost, int) and not isinstance(cost, bool) else None
    by = {k: about.get(k) for k in ("provider", "model", "attempt")}
    if not all(isinstance(v, str) for v in (by["provider"], by["model"])):
        by = dict.fromkeys(by)
    source = about.get("cost_source") if cost is not None else None
    job["rendered_by"] = {**by, "cost_micros": cost, "cost_source": source}
    with ctx.ledger.tx():
        ctx.ledger.checkpoint(
            job,
            [
                ("render", {"adopted": True, "left_by": "another ledger", **by}),
                ("spool", _spooled_detail(ctx, spooled)),
            ],
            "store",
            outcome="rendered",
            output_sha256=spooled.sha256,
            output_size=spooled.size,
        )
        ctx.ledger.record_avoided(job, "spooled", by["provider"], by["model"], cost, source)


def _describe(
    ctx: RunContext,
    job: dict[str, Any],
    size: int | None,
    sha256: str | None,
    by: dict[str, Any] | None = None,
) -> None:
    """Keep beside the job's spool file what its render is (``Spool.describe``), as the render
    is left there beyond its run: the request, the attempt that paid for it (``by``, else
    the job's ``rendered_by`` or the ledger's last succeeded attempt) and the file's size and
    SHA-256. Best effort: a record that cannot be written costs nothing but that help."""
    if size is None or not sha256:
        return
    if by is None:
        try:
            by = _rendered_by(ctx, job)
        except Exception:  # noqa: BLE001 - the ledger broke: the record says what is known
            by = job.get("rendered_by") or {}
    about = {
        "request_hash": job["request_hash"],
        **{k: by.get(k) for k in ("provider", "model", "attempt", "cost_micros", "cost_source")},
        "size": size,
        "sha256": sha256,
    }
    with contextlib.suppress(OSError):
        ctx.spool.describe(job["id"], about)


def _found_own(ctx: RunContext, job: dict[str, Any], meta: dict[str, Any]) -> None:
    """The store step found this job's own object at its key: stored before a crash, or
    another render of the same request that landed first (a run that stalled past its lease
    and stored its late result, ``_keep_late_result``, while this one rendered the job
    again). Either is the job's output: it is verified against the checksum and size its
    metadata records, not against this run's spool, which then holds a second paid render
    (its attempt recorded with its cost)."""
    sha256, size = meta.get("sha256"), meta.get("size")
    found = {"output_sha256": sha256, "output_size": size} if sha256 and size is not None else {}
    with ctx.ledger.tx():
        ctx.ledger.checkpoint(job, [("store", {"found": "own output"})], "verify", **found)
        _adopt_stored(ctx, job, meta)


def _adopt_stored(ctx: RunContext, job: dict[str, Any], meta: dict[str, Any]) -> None:
    """The job's output was stored by its last attempt, whose end a killed process never
    committed: the object's metadata names that attempt and what it cost, so it is recorded
    succeeded at that cost rather than left unknown. Also when the attempt was adopted from
    its spool file first (a crash after the store, before the spool was removed), which
    knew no cost: the metadata does."""
    attempts = ctx.ledger.attempts(job["id"])
    last = attempts[-1] if attempts else None
    if (
        last is not None
        and (
            last["status"] in ("started", "unknown")
            or (
                last["status"] == "succeeded"
                and last["cost_micros"] is None
                and _micros(meta.get("cost")) is not None
            )
        )
        and meta.get("attempt") == last["number"]
        and meta.get("provider") in (None, last["provider"])
    ):
        cost = _micros(meta.get("cost"))
        ctx.ledger.adopt_attempt(
            last["id"],
            "found stored after the process ended (the object's metadata names this attempt)",
            cost_micros=cost,
            cost_source=meta.get("cost_source") if cost is not None else None,
        )


# --- store, verify, finish ----------------------------------------------------------------------


def _rendered_by(ctx: RunContext, job: dict[str, Any]) -> dict[str, Any]:
    """The attempt that rendered the job's output: this run's (``rendered_by``), else the
    ledger's last succeeded attempt (rendered by an earlier run), else nothing known."""
    last = job.get("rendered_by")
    if last is None:  # rendered by an earlier run: the ledger knows which attempt it was
        done = [a for a in ctx.ledger.attempts(job["id"]) if a["status"] == "succeeded"]
        last = dict.fromkeys(("provider", "model", "attempt", "cost_micros", "cost_source"))
        if done:
            a = done[-1]
            last = {
                "provider": a["provider"],
                "model": a["model"],
                "attempt": a["number"],
                "cost_micros": a["cost_micros"],
                "cost_source": a["cost_source"],
            }
    return last


def _object_meta(ctx: RunContext, job: dict[str, Any]) -> dict[str, Any]:
    last = _rendered_by(ctx, job)
    return {
        "job_id": job["id"],
        "key": job["key"],
        "batch": job["batch"],
        "request_hash": job["request_hash"],
        "provider": last["provider"],
        "model": last["model"],
        "attempt": last["attempt"],
        "cost": format_usd(last["cost_micros"]),
        "cost_source": last["cost_source"],
        "sha256": job["output_sha256"],
        "size": job["output_size"],
        # for a person (or an edit suite) looking at the file: what it was asked to be. Readers
        # need only job_id and request_hash, so sidecars written before this are still
        # recognised. S3 keeps it out of its metadata headers (2 KB, ASCII: afc_cli/storage/s3.py)
        "prompt": _prompt(job),
    }


def _prompt(job: dict[str, Any]) -> str | None:
    try:
        return json.loads(job["request_json"])["prompt"]
    except (KeyError, TypeError, ValueError):
        return None


def _micros(text: Any) -> int | None:
    """Micro-USD from the decimal string in object metadata; None if absent or unreadable, or
    not an amount afc writes (negative, infinite, 1,000,000 USD or more: ``usd_problem``),
    which as an avoided render's cost stopped the run ('Python int too large')."""
    if not isinstance(text, str) or usd_problem(text):
        return None
    try:
        return to_micros(Decimal(text))
    except (InvalidOperation, ValueError):
        return None


async def _storage(
    ctx: RunContext, storage: Storage, fn, *args, inline: bool = True, write: bool = False
):
    """A storage call under afc's storage policy: up to STORE_TRIES tries, full-jitter backoff
    honouring Retry-After, for retryable errors only (429, 5xx, SlowDown, throttling, timeouts,
    resets, an upload damaged on the way: BadDigest). Raises the last StorageError when it
    gives up. An answer is noted (``RunContext.answered``), and a ``write``'s answer apart
    (``RunContext.wrote``: an upload taken, or its key found taken, ``ObjectExists``)."""
    for attempt in range(1, STORE_TRIES + 1):
        try:
            done = await _io(ctx, storage, fn, *args, inline=inline)
        except StorageError as exc:
            if not exc.retryable or attempt == STORE_TRIES:
                raise
            await ctx.sleep(_store_delay(attempt, exc))
        except ObjectExists:
            if write:  # the store answered the create-only write: it takes writes
                ctx.answered[id(storage)] = ctx.wrote[id(storage)] = time.monotonic()
            raise
        else:
            ctx.answered[id(storage)] = time.monotonic()
            if write:
                ctx.wrote[id(storage)] = ctx.answered[id(storage)]
            return done
    raise AssertionError("unreachable")


def _store_delay(attempt: int, exc: StorageError) -> float:
    """The storage policy's wait after a retryable failure of try ``attempt``."""
    return backoff_delay(
        attempt, base=STORE_BACKOFF_BASE_S, cap=STORE_BACKOFF_CAP_S, retry_after=exc.retry_after
    )


def check_storage(storage: Storage, sleep: Callable[[float], None] = time.sleep) -> None:
    """``Storage.check`` before a run renders anything, under the storage policy as every
    storage call of a job (``_storage``): with one try, a single passing 500 or SlowDown on
    the bucket's HEAD ended an ``afc submit`` or ``resume`` (exit 1), and a batch left to run
    overnight did not start (bench/soak.py --s3)."""
    for attempt in range(1, STORE_TRIES + 1):
        try:
            return storage.check()
        except StorageError as exc:
            if not exc.retryable or attempt == STORE_TRIES:
                raise
            sleep(_store_delay(attempt, exc))


async def _sync_dirs(ctx: RunContext, storage: Storage, key: str) -> None:
    """The directory fsyncs that make a local store durable, shared with other jobs'.

    Also before a job is recorded stored from an object of its own found at its key (probe,
    store): the run that linked it there may have been killed before its own fsync of the
    folder, whose entry for the object is then in memory only, and a power cut after this
    run recorded the job would leave it succeeded with nothing stored."""
    for directory in storage.unsynced_dirs(key):
        try:
            await ctx.dirs.sync(directory)
        except OSError as exc:
            raise StorageError(f"cannot sync {directory}: {exc}") from None


def _storage_gave_up(ctx: RunContext, job: dict[str, Any], step: str, error: StorageError) -> bool:
    """The storage policy gave up: the job waits at this step (its spool intact) and the next
    run retries only the storage work; after MAX_STORE_REQUEUES runs it is dead-lettered with
    an incident record that says what to do. A job held by another job's refused upload
    (``_HeldForBatch``) made no request: it waits, its count as it was. Counted, each run in
    which one large output's upload was refused dead-lettered the batch's jobs that came to
    their probe after it, never rendered, beside it (tests/test_audit58a_held_not_counted.py)."""
    own = not isinstance(error, _HeldForBatch)
    if not own and error.wait is not None:
        # it waits in this run (``run_job``): for the batch's stores in flight, or one look
        # at its failing storage
        ctx.ledger.set_waiting(job, f"storage: {error.message}")
        ctx.refusal_held[job["id"]] = asyncio.ensure_future(error.wait())
        ctx.report(
            job,
            "waiting",
            "storage: held for its batch's storage; it waits in this run",
            reason=f"storage failed at {step}",
        )
        return False
    storage = ctx.storages.get(job["batch"])
    since = time.monotonic() - STORE_PAUSE_S
    answered = None if storage is None else ctx.answered.get(id(storage))
    wrote = None if storage is None else ctx.wrote.get(id(storage))
    if own and error.retryable and step == "store" and (wrote is None or wrote < since):
        # the upload's tries spent on the store's own failing, and no write of it answered in
        # a pause's time: its reads may answer all the while (a SlowDown storm on PUTs alone),
        # so neither an outage's look (a key's HEAD) nor the bucket's check says the next
        # upload would be taken. The batch's later probes wait for a store of it to succeed
        # in this run, or for the next run (``_storage_broke``): each looked, passed, and
        # paid for a render whose upload was refused in turn (8 jobs, 2 wide: 8 renders paid,
        # 24 PUTs refused; tests/test_audit63e_uploads_failing.py)
        held = ctx.storage_denied.get(job["batch"])
        if held is None or not isinstance(held[0], StorageDenied):
            ctx.storage_denied[job["batch"]] = (error, time.monotonic() + ctx.lease_s)
    elif own and error.retryable and (answered is None or answered < since):
        # the policy's tries spent on the store's own failing, and no call of it answered in
        # a pause's time: the batch's later probes in this run wait for one look after a
        # pause (``_storage_broke``), not each its own. A store that answers others meanwhile
        # fails some calls, not all: paused at each job that gave up, one failing 30% of its
        # requests (2.7% of jobs giving up) held a 10,000-job batch's probes some 270 times
        # 30 s, where each job's own tries cost that job alone
        down = ctx.storage_down.get(job["batch"])
        if down is None or (
            down.trial is not None and down.trial.done() and time.monotonic() >= down.until
        ):
            ctx.storage_down[job["batch"]] = _Outage(error, time.monotonic() + STORE_PAUSE_S)
    failures = job["store_failures"] + own
    spool_path = ctx.spool.path(job["id"])
    if step in ("store", "verify"):
        ctx.storage_failed.add(job["batch"])  # the next probe checks it (``_storage_broke``)
    if isinstance(error, StorageDenied):
        ctx.storage_denied[job["batch"]] = (error, time.monotonic() + ctx.lease_s)
    # At the render step nothing was rendered yet: storage was read (a need's output, or
    # the job's own key looked up before paying again) and could not be. Nor at the probe,
    # unless a run left a spool file for it (a retried job: its render adopts that file)
    before_render = step == "render" or (step == "probe" and not spool_path.exists())
    if not before_render and spool_path.exists():
        # its render waits in the spool beyond this run: said what it is, for a ledger made
        # anew meanwhile (``Spool.left_by``)
        _describe(ctx, job, job.get("output_size"), job.get("output_sha256"))
    if own and failures >= MAX_STORE_REQUEUES:
        safe = f" The paid output is safe in {spool_path}." if spool_path.exists() else ""
        then = (
            "it reads storage again before any render is paid"
            if before_render
            else "it stores the spooled output; no render"
        )
        ctx.ledger.finish(
            job,
            "dead",
            step=step,
            store_failures=failures,
            error_code="STORE_FAILED",
            error_class="storage",
            error_message=f"{error.message} (storage failed in {failures} runs).{safe} Fix the "
            f"storage, then 'afc retry {job['key']}' ({then}).",
        )
    else:
        # Its paid output is in this host's spool alone: the job stays leased to this host
        # for a lease's time, so the run that retries its storage is one of this host's,
        # not a worker elsewhere that would find no spool file (SPOOL_MISSING).
        here = not before_render and spool_path.exists()
        then = (
            "the next run reads storage again before any render is paid"
            if before_render
            else f"the next run retries the {step} step, never the render"
            + (
                f" (a run on host {host_id()}, whose spool holds the output; on another host "
                "only once that lease has run out)"
                if here
                else ""
            )
        )
        pause = STORE_PAUSE_S * 2 ** max(failures - 1, 0)
        pause = min(pause, 0.8 * ctx.lease_s) if here else pause
        # The pause holds for every worker of this host (``paused_s``), and for every other
        # host: the job stays leased to this host for a lease (its output in this spool), or
        # else for the pause alone. Kept by the failing process only, another worker took the
        # job at its next claim and read the failing storage again within a second: a few
        # workers spent its MAX_STORE_REQUEUES in seconds of an outage, dead-lettering it.
        ctx.ledger.set_waiting(
            job,
            f"storage: {error.message}; {then}",
            here_for_s=ctx.lease_s if here else pause,
            paused_s=pause,
            store_failures=failures,
        )
        ctx.ledger.pause_claims(job["id"], pause)
        ctx.report(
            job,
            "waiting",
            f"storage failed at {step}; the next run retries it",
            reason=f"storage failed at {step}",
        )
    return False


def _spooled_detail(ctx: RunContext, spooled: SpoolFile) -> dict[str, Any]:
    """The spool step's checkpoint: the file's size and SHA-256, and the host and spool
    folder it is in (``_spooled_beside`` reads them)."""
    return {
        "size": spooled.size,
        "sha256": spooled.sha256,
        "host": host_id(),
        "dir": str(ctx.spool.root),
    }


def _spooled_beside(ctx: RunContext, job: dict[str, Any]) -> Any:
    """This job's spool file in the spool folder its spool step recorded, when that is
    another folder of this host: a PostgreSQL ledger's spool is ``AFC_SPOOL_DIR``, else
    ``./afc-spool`` of the working folder, so an 'afc resume' on a worker's host run from
    another folder (or without the worker's AFC_SPOOL_DIR) found no file in its own spool and
    dead-lettered the job SPOOL_MISSING, and the retry that message asks for, run there,
    rendered and paid again. A PostgreSQL ledger's folder must be marked as its own; a
    SQLite ledger's is the folder beside its file, and a ledger moved to another folder of
    the host (``mv afc.db archive/``) left its renders in the old one: every job waiting at
    its store step was SPOOL_MISSING, its file 'gone' (outside audit 60d). The caller takes
    the file only when its size and SHA-256 are the checkpoint's (``_copy_beside``). None
    when there is none."""
    identity = ctx.ledger.spool_identity()
    spooled = [s for s in ctx.ledger.steps(job["id"]) if s["step"] == "spool"]
    detail = json.loads(spooled[0]["detail_json"] or "{}") if spooled else {}
    folder = detail.get("dir")
    if detail.get("host") != host_id() or not isinstance(folder, str):
        return None  # none recorded, or another host's (workers spool each on their own disk)
    other = Spool(folder)
    if other.root == ctx.spool.root:
        return None
    if identity is not None and (other.owner() or {}).get("ledger") != identity:
        return None
    found = other.path(job["id"])
    return found if found.is_file() else None


async def _copy_beside(ctx: RunContext, job: dict[str, Any]) -> None:
    """Before a store finds no spool file here: one in another spool folder of this host
    (``_spooled_beside``) whose bytes are the ones checkpointed is copied into this spool
    (that folder's next run sweeps its own copy once the job has succeeded; the folder of a
    SQLite ledger moved away, with no ledger beside it any more, has no next run: its copy
    is removed once this one is durable). A copy that fails is a storage failure of the
    store step (the job waits, the render kept there)."""
    other = _spooled_beside(ctx, job)
    if other is None:
        return
    if await asyncio.to_thread(damage, other, job["output_size"], job["output_sha256"]):
        return  # not this job's render: left alone, as a missing file is
    try:
        await asyncio.to_thread(ctx.spool.copy_in, job["id"], other)
    except OSError as exc:
        raise StorageError(
            f"cannot copy the spool file {other} into this run's spool {ctx.spool.root}: "
            f"{exc.strerror or exc}",
            retryable=False,
        ) from None
    ctx.ledger.note(job, "spool_copied", source=str(other))
    if ctx.ledger.spool_identity() is None:
        await asyncio.to_thread(_drop_moved_away, other)


def _drop_moved_away(copied: Path) -> None:
    """Remove a spool file ``_copy_beside`` copied from a folder no run uses any more, and
    its ``.about`` record: the folder of a SQLite ledger moved away, or one named after a
    symbolic link to the ledger (an earlier afc's: the spool is beside the file the link
    names now, ``spool.spool_beside``). The file alone (a ``.late`` one there is another
    render). A folder with its ledger file still beside it (a copy of the ledger, run there
    too) keeps it for that ledger's runs."""
    folder = copied.parent
    if not folder.name.endswith("-spool"):
        return
    ledger = folder.with_name(folder.name.removesuffix("-spool"))
    with contextlib.suppress(OSError):
        if ledger.is_symlink() or not ledger.exists():
            copied.unlink()
            copied.with_suffix(".about").unlink(missing_ok=True)


async def store(ctx: RunContext, job: dict[str, Any]) -> bool:
    """Create the object from the spool file. On local storage the read-back follows in the
    same call and the job finishes in one transaction (its ``store`` checkpoint included): a
    crash before that transaction costs a create that finds its own object, never an upload."""
    storage = ctx.storages[job["batch"]]
    spool_path = ctx.spool.path(job["id"])
    key = job["output_key"]
    problem = None
    fail_point("spooled")  # tests: an error of afc's own, the render in the spool
    try:
        if not spool_path.exists():
            await _copy_beside(ctx, job)
        meta = _object_meta(ctx, job)
        try:
            if storage.local:
                outcome, problem = await _storage(
                    ctx,
                    storage,
                    store_and_verify,
                    storage,
                    key,
                    spool_path,
                    meta,
                    inline=False,
                    write=True,
                )
            elif spool_path.exists():
                problem = await asyncio.to_thread(
                    damage, spool_path, meta.get("size"), meta.get("sha256")
                )
                if problem:
                    outcome = "damaged"
                else:
                    stall_point("spool_checked", before=ctx.ledger.flush)  # tests
                    await _storage(
                        ctx,
                        storage,
                        storage.put_if_absent,
                        key,
                        spool_path,
                        meta,
                        inline=False,
                        write=True,
                    )
                    outcome = "stored"
            else:
                outcome = "missing"
        except ObjectExists:
            # Someone wrote the key first; an earlier upload of ours that landed is success.
            info = await _storage(ctx, storage, storage.head, key)
            foreign = ownership(job, info)
            if foreign:
                await _fail_conflict(ctx, job, storage, info, foreign, "store")
                return False
            if not info.exists:
                # taken, yet no object: metadata (written first) of another render of this
                # job whose writer died before its object, or is writing it now (a stalled
                # run's late result), or an object gone since. Nothing to verify: the job
                # waits in store with its spool file, and the next run tries the store again
                raise StorageError(
                    f"cannot store {storage.describe(key)}: the key was taken as it was "
                    "written and holds no object now"
                    + (
                        " (its metadata names another render of this job: its writer died "
                        "before the object, or is storing it now; if no afc process is, "
                        f"remove {storage.describe(key)}.afc.json)"
                        if info.meta
                        else ""
                    ),
                    retryable=False,
                ) from None
            await _sync_dirs(ctx, storage, key)  # its folder durable first
            _found_own(ctx, job, info.meta)
            return True
        if outcome in ("missing", "damaged"):
            info = await _storage(ctx, storage, storage.head, key)
            if info.exists and ownership(job, info) is None:
                await _sync_dirs(ctx, storage, key)  # its folder durable first
                _found_own(ctx, job, info.meta)  # stored before (verify reads it back)
                return True
            if outcome == "damaged":
                return await _spool_damaged(ctx, job, spool_path, problem)
            ctx.ledger.finish(
                job,
                "dead",
                step="store",
                error_code="SPOOL_MISSING",
                error_message=_spool_missing(ctx, job, spool_path),
            )
            return False
        await _sync_dirs(ctx, storage, key)
    except StorageError as exc:
        return _storage_gave_up(ctx, job, "store", exc)
    ctx.storage_denied.pop(job["batch"], None)  # the store takes this batch's uploads
    lifted = ctx.stored_ok.pop(job["batch"], None)
    if lifted is not None and not lifted.done():
        lifted.set_result(None)  # the jobs its refusal held in this run look again
    crash_point("after_store")
    stored = ("store", {"url": storage.describe(key)})
    if storage.local:
        return await _verified(ctx, job, problem, [stored])
    ctx.ledger.checkpoint(job, [stored], "verify")
    return True


async def _spool_damaged(ctx: RunContext, job: dict[str, Any], spool_path: Any, problem) -> bool:
    """The spool file is not what its checkpoint recorded (``spool.damage``): its bytes are
    not the render that was paid for, and are never stored as the job's output. It is moved
    aside (never adopted by a later run), and the job dead-lettered for a person, as a
    missing spool file is: afc does not pay for a new render on its own."""
    try:
        aside = await ctx.offload(set_aside, spool_path)
    except OSError as exc:
        aside, kept = spool_path, f"it could not be moved aside ({exc}): remove it, then "
    else:
        kept = "it is kept at that path; "
    ctx.ledger.finish(
        job,
        "dead",
        step="store",
        error_code="SPOOL_DAMAGED",
        error_class="storage",
        error_message=f"the rendered output's spool file {aside} was damaged after it was "
        f"spooled: {problem}. Nothing was stored under {job['output_key']}; {kept}"
        f"'afc retry {job['key']}' renders the job again (a new paid render: the one paid for "
        "is lost).",
    )
    return False


def _rendered_elsewhere(ctx: RunContext, job: dict[str, Any]) -> str | None:
    """The owner of the attempt that rendered the job, when it ran on another machine: another
    host, or another machine under this host's id (``owner.host_lease_of``); else None."""
    rendered = [a for a in ctx.ledger.attempts(job["id"]) if a["status"] == "succeeded"]
    by = rendered[-1]["owner"] if rendered else None
    host = host_of(by) if by else ""
    if host and (host != host_id() or not is_spool_hold_of(host_lease_of(by), ctx.ledger.owner)):
        return by
    return None


def _spooled_elsewhere(ctx: RunContext, job: dict[str, Any]) -> str | None:
    """``_rendered_elsewhere``, on a ledger whose hosts spool each on their own disk: the
    job's paid render is in that machine's spool; else None."""
    return _rendered_elsewhere(ctx, job) if ctx.ledger.SPOOL_PER_HOST else None


def _spool_missing(
    ctx: RunContext, job: dict[str, Any], spool_path: Any, gone: str | None = None
) -> str:
    """Why a job at its store step has no spool file here, and what a person can do: the file
    may be on the host whose run rendered it (workers on several machines each spool on their
    own disk), or gone. ``gone``: the object its upload stored (gone from storage before its
    read-back), which that host did not store again within a lease (``verify``)."""
    by = _rendered_elsewhere(ctx, job)
    host = host_of(by) if by else ""
    never = (
        "never stored"
        if gone is None
        else f"stored, but {gone} is gone since, and no run of that host stored it again "
        "within a lease"
    )
    keep = (
        f"afc will not pay for a new render on its own: put the file back, then 'afc retry "
        f"{job['key']}' on the host whose spool has it (the job stays with that host for a "
        "lease, and a run there stores the file and pays nothing; without the file, a retry "
        "renders and pays again)."
    )
    if host and host != host_id():
        return (
            f"the rendered output was spooled on host {host} and {never}; its spool file "
            f"({spool_path.name}, in that host's AFC_SPOOL_DIR) is not on this host "
            f"({host_id()}). Copy it into this host's spool ({spool_path.parent}) or any "
            f"worker's; {keep}"
        )
    if host:
        # this host's id, another machine's fingerprint (owner.host_lease_of): the file is
        # on that machine, not gone
        return (
            f"the rendered output was spooled on another machine that runs afc under this "
            f"host's id ({host}) and {never}; its spool file ({spool_path.name}, in that "
            f"machine's AFC_SPOOL_DIR) is not on this one. Copy it into this host's spool "
            f"({spool_path.parent}) or any worker's; {keep}"
        )
    return (
        f"the rendered output's spool file {spool_path} is gone and the output was {never}; {keep}"
    )


async def verify(ctx: RunContext, job: dict[str, Any]) -> bool:
    storage = ctx.storages[job["batch"]]
    if job.pop("claimed_at", None) == "verify":
        # Its upload was an earlier run's, whose read-back failed (a storage outage), so the
        # key is looked at first (tests/test_audit55d_gone_before_verify.py,
        # test_audit55d_replaced_before_verify.py, test_audit55d_gone_other_host.py)
        # its render in this spool, or in another spool folder of this host, which the store
        # step copies it from (``_copy_beside``): read back with no file here, it was
        # VERIFY_FAILED 'no spool file is left', and the retry paid for the render again
        # (tests/test_audit55d_gone_spool_beside.py)
        spooled_here = ctx.spool.path(job["id"]).exists() or _spooled_beside(ctx, job) is not None
        rendered_by = None if spooled_here else _spooled_elsewhere(ctx, job)
        elsewhere = host_of(rendered_by) if rendered_by else None
        if spooled_here or elsewhere:
            try:
                info = await _storage(ctx, storage, storage.head, job["output_key"])
            except StorageError as exc:
                return _storage_gave_up(ctx, job, "verify", exc)
            foreign = ownership(job, info) if info.exists else None
            if foreign:
                # someone else's object over the upload (another tool's unconditional
                # write): read back as the job's own, it failed VERIFY_FAILED with the advice
                # to delete it, as if it carried this job's metadata. A conflict at the store,
                # as one found there: the render kept, a retry stores it once the key is free
                await _fail_conflict(ctx, job, storage, info, foreign, "store")
                return False
            if not info.exists and elsewhere:
                # gone, its render in another host's spool: that host's run stores it again
                # (below). Read back here, it was VERIFY_FAILED 'no spool file is left', and
                # the retry that asked for paid for the render again on any host
                where = (
                    # this host's id, another machine's (``_spool_missing``): it said 'the
                    # spool of host render-01, not this host's (render-01)', naming this host
                    f"the spool of another machine that runs afc under this host's id "
                    f"({elsewhere}), not this one's: a run on that machine stores it again"
                    if elsewhere == host_id()
                    else f"the spool of host {elsewhere}, not this host's ({host_id()}): a "
                    f"run on host {elsewhere} stores it again"
                )
                # Left to that machine (its spool hold, for a lease: a run there takes it at
                # once, another host's only once the lease runs out), no storage failure
                # counted: as one, the job was leased to this host for the pause (the one
                # machine without the render) and dead-lettered STORE_FAILED 'fix the
                # storage' after four runs here, the render's worker away for minutes
                gone = f"storage: {storage.describe(job['output_key'])} is not there, and this "
                why = f"{gone}job's paid render is in {where}"
                if job["status"] == "waiting" and (job.get("waiting_reason") or "").startswith(
                    gone
                ):
                    # Left to that machine for a lease already, and it has not stored it: as
                    # the store step's wait for a render in another spool (SPOOL_MISSING), the
                    # job is a person's now. Left again, every other host's run took it over
                    # and left it so, for ever (after 20, CRASH_LOOP 'the run working on this
                    # job ended without finishing it'), naming a host that may be gone for
                    # good; a new render, which pays again, is a person's decision
                    ctx.ledger.finish(
                        job,
                        "dead",
                        step="store",
                        error_code="SPOOL_MISSING",
                        error_message=_spool_missing(
                            ctx, job, ctx.spool.path(job["id"]), storage.describe(job["output_key"])
                        ),
                    )
                    return False
                ctx.ledger.set_waiting(
                    job,
                    why,
                    lease_owner=host_lease_of(rendered_by),
                    lease_expires=ctx.ledger.lease_clock() + ctx.lease_s,
                    lease_mono=None,
                )
                ctx.report(job, "waiting", why, reason="spooled elsewhere")
                return False
            if not info.exists:
                # gone from the key since (a person tidying the bucket, a lifecycle rule, a
                # store that lost the write in a crash), its render in this spool: stored
                # again, create-only. Read back again, every later run found nothing ('not
                # there, though the store took the upload') until the job was dead-lettered
                with ctx.ledger.tx():  # the step and the event that says why, together
                    ctx.ledger.checkpoint(job, [], "store")
                    ctx.ledger.note(
                        job,
                        "stored_again",
                        url=storage.describe(job["output_key"]),
                        reason="no object at its key at its read-back; its render is in the spool",
                    )
                return True
    small = (job["output_size"] or 0) <= INLINE_READ_BYTES
    try:
        problem = await _read_back(ctx, storage, job, small)
    except StorageError as exc:
        return _storage_gave_up(ctx, job, "verify", exc)
    if problem and problem.endswith(NOT_THERE) and not storage.local:
        try:
            problem = await _there_again(ctx, storage, job, small, problem)
        except StorageError as exc:
            return _storage_gave_up(ctx, job, "verify", exc)
    if problem and not problem.endswith(NOT_THERE):
        # Not what was uploaded: whose object is it? Another job's over this upload, the
        # store having taken it (a store that takes 'If-None-Match: *' and ignores it, or a
        # tool writing without it), failed VERIFY_FAILED with the advice to delete it as
        # this job's own: the other job's output. A conflict, as at the store
        try:
            info = await _storage(ctx, storage, storage.head, job["output_key"])
        except StorageError as exc:
            return _storage_gave_up(ctx, job, "verify", exc)
        foreign = ownership(job, info) if info.exists else None
        if foreign:
            # 'replaced' where the upload was this run's, from the spool file (not an output
            # found stored and adopted, which no upload of this job put there)
            uploaded = ctx.spool.path(job["id"]).exists()
            await _fail_conflict(ctx, job, storage, info, foreign, "store", replaced=uploaded)
            return False
    return await _verified(ctx, job, problem)


async def _read_back(
    ctx: RunContext, storage: Storage, job: dict[str, Any], small: bool
) -> str | None:
    """The job's object read back against what was spooled (``Storage.verify``), under the
    storage policy: None, or what is wrong. ``small``: read inline, not in the file helper."""
    return await _storage(
        ctx,
        storage,
        storage.verify,
        job["output_key"],
        job["output_size"],
        job["output_sha256"],
        ctx.spool.path(job["id"]),
        inline=small,
    )


async def _there_again(
    ctx: RunContext, storage: Storage, job: dict[str, Any], small: bool, problem: str | None
) -> str | None:
    """The read-back of an object with no spool file here (one found stored and adopted, a
    HEAD having just shown it) found nothing at the key: looked at again under the storage
    policy, as a read-back of an upload from the spool is (``S3Storage.verify``). A store, or
    a replica behind a load balancer, not consistent at once answers such a HEAD 404 for a
    moment: taken as the answer, the job failed VERIFY_FAILED, its output there a moment
    later, saying a retry pays for a new render. Still not there after the policy's tries,
    the finding stands (removed since: a person, a lifecycle rule)."""
    for attempt in range(1, STORE_TRIES):
        await ctx.sleep(_store_delay(attempt, StorageError(NOT_THERE, retryable=True)))
        problem = await _read_back(ctx, storage, job, small)
        if not (problem and problem.endswith(NOT_THERE)):
            break
    return problem


async def _verified(ctx: RunContext, job: dict[str, Any], problem: str | None, steps=()) -> bool:
    """End the job on its read-back: failed if the object is not what was spooled, else
    succeeded (verify and finish commit together: verify only reads, so a crash before this
    transaction costs one read-back, and a job never rests "verified but not finished")."""
    if problem:
        where = ctx.storages[job["batch"]].held_at(job["output_key"])
        spooled = ctx.spool.path(job["id"])
        # The object at the key carries this job's own metadata, so 'afc retry' alone finds
        # it again, reads it back and fails the same way: the way out is said here. afc never
        # deletes or overwrites a stored object on its own (a person's decision). With no
        # object at the key at all (NOT_THERE), a retry alone finds the key free: it said to
        # delete the object first, one that is not there
        in_spool = spooled.exists()
        first = (
            ""
            if problem.endswith(NOT_THERE)
            else f"delete {where} (a retry alone finds this job's own object there again and "
            "fails the same way), then "
        )
        if in_spool:
            kept = (
                f"The spool file {spooled} is kept. To store it: {first}'afc retry "
                f"{job['key']}' on this host ({host_id()}), whose spool has the file: the next "
                "run stores it and pays for no new render."
            )
        else:
            kept = (
                "No spool file is left for it (its render was found in storage, or stored "
                f"here and its spool file removed then). To render it again: {first}'afc "
                f"retry {job['key']}': the next run pays for a new render."
            )
        with ctx.ledger.tx():
            if ctx.ledger.finish(
                job,
                "failed",
                step="verify",
                steps=steps,
                error_code="VERIFY_FAILED",
                error_class="storage",
                error_message=f"{problem}; expected {job['output_size']} bytes sha256 "
                f"{job['output_sha256']}. {kept}",
            ):
                # an output found in storage that reads back wrong avoided no render
                ctx.ledger.forget_found(job)
        return False
    checked = ("verify", {"size": job["output_size"], "sha256": job["output_sha256"]})
    won = _complete(ctx, job, [*steps, checked])
    crash_point("after_terminal", before=ctx.ledger.flush)
    if won:
        # No need to wait for the commit: were it lost, the next run finds the stored,
        # verified output at the key (store checks storage when the spool is gone).
        await _remove_spooled(ctx, job)
    return False


async def _remove_spooled(ctx: RunContext, job: dict[str, Any]) -> None:
    """Remove the spool files of a job whose output is stored and verified (it succeeded, or
    awaits review). Housekeeping only: a removal the disk refuses (a spool disk remounted
    read-only after an I/O error, EROFS) is said, and a later run's sweep removes the files
    (``run.sweep_spool``). Raised, it ended the run at once as an error of the run's own,
    which cancelled every other job's paid call in flight: left unknown, and the next run
    paid for each again (tests/test_audit54b_spool_cleanup.py)."""
    try:
        await ctx.offload(ctx.spool.remove, job["id"])
    except OSError as exc:
        ctx.notice(
            f"{job['batch']}/{job['key']}: succeeded, but its spool files could not be removed "
            f"({exc}); a later run removes them"
        )


def _complete(ctx: RunContext, job: dict[str, Any], steps=()) -> bool:
    """A verified job succeeds, or, with ``review: true``, waits for a person's decision
    (``awaiting_review``, its output stored; afc_cli/review.py)."""
    if job.get("review"):
        stall_point(
            "reviewed", before=ctx.ledger.flush
        )  # tests: read back, a person's cancel and retry may come
        return ctx.ledger.await_review(job, steps)
    return _succeed(ctx, job, steps)


def _succeed(ctx: RunContext, job: dict[str, Any], steps=()) -> bool:
    return ctx.ledger.finish(
        job, "succeeded", step="finish", detail={"output_key": job["output_key"]}, steps=steps
    )


async def finish(ctx: RunContext, job: dict[str, Any]) -> bool:
    if _complete(ctx, job):
        await _remove_spooled(ctx, job)
    return False


RENDER_STEPS = frozenset({"probe", "render"})
SPOOL_STEP = frozenset({"spool"})
STORE_STEPS = frozenset({"store", "verify", "finish"})
STEPS = {
    "probe": probe,
    "render": render,
    "spool": spool,
    "store": store,
    "verify": verify,
    "finish": finish,
}
