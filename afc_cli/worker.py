"""``afc worker``: claim runnable jobs of any batch from a shared ledger, run them, repeat.

Run one on each machine (README: "Running on several machines"); they share one PostgreSQL
ledger and one bucket. Each round claims up to ``claim`` jobs in one transaction
(``Ledger.claim_runnable``: ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so workers pick different
jobs), runs them through the same loop as ``afc resume`` (``run.run_jobs``: leases renewed,
every write fenced by the lease owner, webhooks drained beside); whenever that loop runs low
(no more than ``concurrency`` jobs left) it claims the next round into the same loop
(``Refill``), and a new loop starts only once a claim finds nothing. With nothing to claim it
polls every ``poll_s`` seconds; due webhooks are drained meanwhile with a claim beside every
``poll_s`` (``drain_while_idle``: a hung receiver never holds new jobs back). A round whose
storage check fails (before any of it ran) is released at once; a retryable failure is tried
again after ``poll_s`` (said once, then every ``STORAGE_DOWN_SAY_S``, and its end once), any
other ends the worker.

SIGTERM, SIGHUP or Ctrl-C stops it: while idle at once; while jobs run, by the run loop's drain (no
new provider call; calls in flight finish within ``--grace``, are recorded and stored; then
the leases are released for other workers, but a job whose output is in this host's spool
goes to this host, ``owner.host_lease``, for what is left of the lease). A worker that
drained cleanly exits 0: stopping is its normal end. One that abandoned calls in flight (a
second signal, the grace ran out) exits 130, since those attempts are recorded ``unknown``
and possibly paid. ``--until-idle`` (a script's worker) exits 1 when a job it ran ended
failed, dead or cancelled, as ``afc resume`` does, and 130 when a signal stopped it before it
went idle, as an interrupted ``afc resume`` does (``WorkerResult.exit_code``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import select
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from afc_cli import streams
from afc_cli.errors import (
    EXIT_BUDGET,
    EXIT_INTERRUPTED,
    EXIT_JOB_FAILED,
    STOP_SIGNALS,
    AfcError,
    LedgerError,
    StorageError,
    UsageError,
)
from afc_cli.ledger import SHARED_BUDGET, Ledger
from afc_cli.ledger.core import fail_point, unfinished_copy_source
from afc_cli.owner import host_id, host_of, is_host_lease, shown

if TYPE_CHECKING:
    from fractions import Fraction

DEFAULT_POLL_S = 2.0
MAX_CLAIM = 1_000_000  # jobs one claim round takes at most (--claim)
# How long a worker waits for 'afc ledger copy' to open the copy it found in its ledger (the
# copy's own ``ledger_moves`` row, removed once the source is marked moved: milliseconds after
# the copy committed) before it takes the copy for one that stopped and refuses it (exit 2)
COPY_OPEN_WAIT_S = 10.0
# How often a worker whose storage check keeps failing (a bucket's endpoint down) says so again:
# its first failure is said at once, then once every this many seconds for as long as it lasts,
# and its end once (``work``). Said at every --poll, a service's journal took a line every few
# seconds for the length of the outage (an hour's: over a thousand of the same line).
STORAGE_DOWN_SAY_S = 600.0
# The share of a worker's time its look for blocked jobs whose needs have ended may take at
# most (``Settle``)
SETTLE_SHARE = 0.05
# The most blocked jobs one look settles (``Ledger.settle_ready_blocked``' limit)
SETTLE_AT_ONCE = 1000


class Stop:
    """A stop that a signal handler may ask for: a flag and a pipe, no lock.

    ``threading.Event.set`` takes the event's lock; a handler runs in the main thread between
    two bytecodes, possibly while that same thread holds the lock inside ``Event.wait``, and
    would then wait for itself forever (a worker deaf to SIGTERM). ``set`` here only assigns
    and writes a byte; ``wait`` sleeps in ``select`` on the pipe, woken by that byte at once."""

    def __init__(self) -> None:
        self.flag = False
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)

    def set(self) -> None:
        self.flag = True
        try:
            os.write(self._write, b"x")
        except OSError:  # the pipe is full (already woken) or closed: the flag is set
            pass

    def is_set(self) -> bool:
        return self.flag

    def wait(self, timeout: float) -> bool:
        if not self.flag:
            select.select([self._read], [], [], timeout)
        return self.flag

    def fileno(self) -> int:
        """Readable once ``set``: an event loop waits on it (``drain_while_idle``)."""
        return self._read

    def close(self) -> None:
        os.close(self._read)
        os.close(self._write)


class Settle:
    """A worker's claims settle the blocked jobs whose needs have all ended first
    (``Ledger.settle_ready_blocked``: ``queued``, or failed with DEPENDENCY_FAILED). That look
    reads every blocked job of its scope with its needs, about 2.4 µs a job on SQLite and 1.1
    µs of PostgreSQL's time: done at every claim, a batch of 10,000 shots blocked behind a
    style frame awaiting review cost each claim 24 ms, and behind 100,000 a quarter of a
    second, at every idle poll for the days the review took and at every round of a busy
    worker's other batches (a worker on SQLite draining 5,000 instant jobs beside 10,000
    blocked ones spent 27 % more CPU).

    So a claim settles only once at least ``1 / SETTLE_SHARE`` times the last look's
    duration has passed since that look began: the look takes no more than 5 % of the
    worker's time, and a blocked job whose needs ended waits for a claim at most that long
    (half a second behind 10,000 blocked jobs; on a small ledger the look takes well under
    a millisecond and is done at every claim, as before). A look that settled as many as
    one may (``SETTLE_AT_ONCE``) left more behind, a style frame approved before 100,000
    shots: the next claim looks again. Its time went to settling the jobs the worker is
    there to run, and paused for twenty times it (5.6 s on SQLite), the shots of such an
    approval were queued no faster than 180 a second. ``force`` looks whenever asked:
    before ``--until-idle`` says it is idle, which it must not say with jobs left that a
    look would have made runnable. ``clock`` is injectable for tests."""

    def __init__(
        self,
        ledger: Ledger,
        batch: str | None,
        clock: Callable[[], float] = time.monotonic,
        failed: Callable[[list[dict[str, Any]]], None] | None = None,
    ):
        self.ledger, self.batch, self.clock = ledger, batch, clock
        self.next_at: float | None = None  # when the next look is due; at once at first
        # told the jobs a look failed with DEPENDENCY_FAILED (``Worker``'s line and exit
        # code count them; said one line each, as 'afc resume' says the jobs it fails so)
        self.failed = failed

    def __call__(self, force: bool = False) -> int:
        """Settle now if due (or ``force``): how many jobs it settled."""
        began = self.clock()
        if not force and self.next_at is not None and began < self.next_at:
            return 0
        failed: list[dict[str, Any]] = []
        settled = self.ledger.settle_ready_blocked(self.batch, SETTLE_AT_ONCE, failed)
        if failed and self.failed is not None:
            self.failed(failed)
        more = settled >= SETTLE_AT_ONCE  # more left to settle: looked for at the next claim
        self.next_at = began if more else began + (self.clock() - began) / SETTLE_SHARE
        return settled


class Refill:
    """The run loop's ``more`` (run.run_jobs): when it runs low, the next claim's jobs join the
    running loop instead of a new loop starting per claim (a third of a worker's time went
    to restarting the loop, at a claim of a thousand instant jobs). A claim made once a batch
    the loop opened has changed (``opened``: ``batch_settings``, its batches with their
    provider ``limits`` and rate cards, which a re-submit changed), once a batch was admitted
    with stricter limits than the loop's (``_take_admitted``; one with no stricter limits
    joins the loop), or once a newer afc migrated the ledger, or that holds a provider
    without its key here or a chain the budget cannot price, is released at once and ends the
    feeding: the loop drains, and the worker's next round claims again with everything read
    afresh (and reports the error as it did). The loop holds the limits and prices of its
    start, and a busy worker's loop, fed claim after claim, never ended to read them again (a
    limit lowered after a provider's 429s went on unheeded for as long as work came)."""

    def __init__(
        self,
        ledger: Ledger,
        claim: int,
        lease_s: float,
        batch: str | None,
        opened: dict[str, tuple],
        check: Any,
        stop: Stop,
        result: WorkerResult,
        reporter: Any,
        settle: Settle,
    ):
        self.ledger, self.claim, self.lease_s, self.batch = ledger, claim, lease_s, batch
        self.opened, self.check, self.stop = opened, check, stop
        self.result, self.reporter, self.settle = result, reporter, settle
        # a script's worker: a signal that stops its run makes an error met then exit 130
        # (run.run_jobs), as ``WorkerResult.exit_code`` makes its clean end
        self.until_idle = result.until_idle
        self.done = False

    def __call__(self, running: set[str]) -> list[str]:
        if self.done or self.stop.is_set():
            return []
        self.settle()
        jobs = self.ledger.claim_runnable(
            self.claim, self.lease_s, batch=self.batch, skip=running, settle=False
        )
        if not jobs:
            return []
        fail_point("refill")  # tests: an error of afc's own, the claim committed
        try:
            if self.ledger.newer_migrations():
                # a newer afc migrated the ledger: the round ends with the jobs it runs, and
                # the worker's next claim stops it (``check_schema``, exit 2). Fed on, a
                # round ran its claims on a schema it does not know for as long as work came
                # (every --poll since 5c55cf6, not only while busy)
                raise UsageError("the ledger was migrated by a newer afc since the loop started")
            self._take_admitted()
            self.check(jobs)
        except UsageError:
            for job in jobs:
                self.ledger.release(job)
            self.done = True
            return []
        self._count(1, len(jobs))
        return [job["id"] for job in jobs]

    def given_back(self, job_ids: list[str]) -> None:
        """A claim the loop gave back unrun (``run._fed``: an output it could not store, a
        batch whose storage failed its check) is not counted, as a round's claim given back
        before its loop is not: the worker's summary counted it claimed, and its live line
        counted its jobs as to run in this loop."""
        self._count(-1, -len(job_ids))

    def _count(self, rounds: int, jobs: int) -> None:
        """The worker's round and claim counts, and the live line's job count."""
        self.result.rounds += rounds
        self.result.claimed += jobs
        progress = getattr(self.reporter, "progress", None)
        if progress is not None:
            progress.total += jobs

    def _take_admitted(self) -> None:
        """Batches admitted since the loop started join it (its storage opened and checked,
        its rate cards read: ``run._open_batches``), unless they make a provider's limits
        stricter, which the loop read at its start (``run.provider_limits``). A batch whose
        limits or rate cards changed since (a re-submit) is refused the same way: the
        round ends with the jobs it runs, and the next one reads them anew (UsageError)."""
        from afc_cli.run import merged_limits

        now = batch_settings(self.ledger)
        if any(now.get(name, settings) != settings for name, settings in self.opened.items()):
            raise UsageError("a batch changed since the loop started")
        added = {name: settings for name, settings in now.items() if name not in self.opened}
        if not added:
            return
        limits = [limits for limits, _ in self.opened.values()]
        before = merged_limits(limits)
        after = merged_limits([*limits, *(settings[0] for settings in added.values())])
        if _set_limits(before) != _set_limits(after):
            raise UsageError("a batch admitted since the loop started sets stricter limits")
        self.opened.update(added)


def _set_limits(limits: dict[str, dict[str, int | None]]) -> dict[str, dict[str, int | None]]:
    """The providers whose limits set something: one named with every value null limits
    nothing, as one not named (a batch admitted with it ended a worker's feeding for no
    change)."""
    return {
        name: values
        for name, values in limits.items()
        if any(value is not None for value in values.values())
    }


def drain_while_idle(
    ledger: Ledger,
    stop: Stop,
    poll_s: float,
    claim: Callable[[], list[dict[str, Any]]],
) -> list[dict[str, Any]]:
    """An idle worker's drain of its due webhook events (one pass, ``Deliverer.drain``), with
    a claim every ``poll_s`` seconds beside it: the jobs of the first claim that finds any are
    returned at once, the drain cancelled, for the worker's round to run (none if the pass
    ended, or a stop came, first).

    A receiver that is down or slow never holds up a render (README, "Webhooks": never in
    the paid path). The drain used to run alone, and a receiver holding its POST kept every
    new job waiting until the POST's ``timeout_s`` (at most 120 s). A POST the cancel
    abandons for jobs keeps its row leased to
    this worker until the lease runs out (the round's drain would post it again at once into
    a receiver perhaps still holding it), then it is posted again with the same
    ``webhook-id`` (at least once, as after any interrupted run); one a stop cuts short is
    given back at once (``Deliverer.give_back``). The rows of the pass not yet posted are
    released at once, and the round's run loop drains them beside its jobs. A worker already
    stopping (a signal during its claim, or its look for due events) starts no drain: its
    first turn claimed and began a POST before it saw the stop."""
    import asyncio

    from afc_cli.webhooks import Deliverer

    if stop.is_set():  # a signal during the look for due events: no POST starts after it
        return []

    async def main() -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()
        loop.add_reader(stop.fileno(), woken.set)  # a signal's byte: stop waiting at once
        deliverer = Deliverer(ledger)
        try:
            with ledger.grouped(loop):
                drain = asyncio.create_task(deliverer.drain())
                signalled = asyncio.create_task(woken.wait())
                try:
                    while True:
                        await asyncio.wait(
                            {drain, signalled}, timeout=poll_s, return_when=asyncio.FIRST_COMPLETED
                        )
                        if drain.done():
                            drain.result()  # its error, if any, is the worker's
                            return []
                        if stop.is_set():
                            return []
                        jobs = claim()
                        if jobs:
                            deliverer.give_back = False  # a POST under way stays leased
                            return jobs
                finally:
                    signalled.cancel()
                    drain.cancel()
                    await asyncio.wait({drain, signalled})
        finally:
            loop.remove_reader(stop.fileno())
            await deliverer.close()

    # its claims look for blocked jobs (``Settle``) and say the ones they fail, their writes
    # waiting in the group's open transaction: written by a thread of their own, as a round's
    # lines are (afc_cli/streams.py), so that a reader who does not read (a full pipe, a
    # paused terminal) never stops the drain holding the ledger; written out once it ended
    with streams.detached():
        return asyncio.run(main())


def batch_settings(ledger: Ledger) -> dict[str, tuple]:
    """Each batch's provider limits and rate cards as admitted (what a run loop reads at its
    start: ``run.provider_limits``, ``run.batch_rates``), by batch name. The cards compared
    by price, as ``Ledger.admit`` compares them: a card written anew at the same price
    ("0.05" as "0.050") ended a worker's refill, its new work waiting for the renders in
    flight to end, for a change there was not."""
    return {
        row["name"]: (row["limits_json"], _priced(row["rates_json"] or ""))
        for row in ledger.batches()
    }


@functools.lru_cache(maxsize=1024)
def _priced(rates_json: str) -> dict:
    """A batch's recorded cards by price, each text parsed once (every refill compares every
    batch's: ``_take_admitted``); compared only, never changed."""
    from afc_cli.costs import RateCards

    return RateCards.from_text(rates_json).cards


@dataclass
class WorkerResult:
    rounds: int = 0  # claims that found work
    claimed: int = 0
    finished: int = 0  # jobs brought to a terminal state by this worker
    failed: int = 0  # of those, the ones that ended failed, dead or cancelled
    cancelled: int = 0  # of ``failed``, the cancelled ones (its line says them apart)
    until_idle: bool = False  # --until-idle: a job it ran that failed makes its exit 1
    spent_micros: int = 0  # priced spend of the attempts this worker started (never others')
    unknown_cost_attempts: int = 0  # of those, the ones whose cost is unknown
    stopped_by_signal: bool = False
    abandoned: int = 0
    budget_hit: bool = False
    budget: dict[str, Any] | None = None  # the shared budget's cap and spend, all workers
    # what the shared budget counted (known costs, else reservations) as this worker started,
    # and as it ended: a budget that ran out on a worker that started nothing was spent
    # before it started (a night's before) or, grown since, by its other workers meanwhile
    budget_at_start: int = 0
    budget_at_end: int = 0
    # --until-idle --batch: its jobs left waiting on an output key another batch's job holds
    held_elsewhere: int = 0
    idle: bool = False  # --until-idle: it found nothing left to run (its end)
    # --until-idle, once idle: the jobs of its scope left for a person (awaiting review) and
    # those blocked on needs, which no round runs until then: said, as 'afc resume' says them
    awaiting_review: int = 0
    blocked: int = 0

    @property
    def exit_code(self) -> int:
        if self.abandoned:
            return EXIT_INTERRUPTED
        if self.until_idle and self.stopped_by_signal and not self.idle:
            # a script's worker stopped before it went idle (a CI job's or cron's timeout):
            # jobs are left to run, and 0 told the script the batch was done, as 'afc resume'
            # interrupted exits 130
            return EXIT_INTERRUPTED
        if self.budget_hit:
            return EXIT_BUDGET
        # a script's 'afc worker --until-idle' is a run, as 'afc resume' is: a job it ran
        # that failed is exit 1; a service's worker stopped by SIGTERM exits 0 whatever its
        # jobs did (stopping is its normal end: 'afc status' and 'queue stats' say the rest)
        return EXIT_JOB_FAILED if self.until_idle and (self.failed or self.held_elsewhere) else 0

    def as_json(self) -> dict[str, Any]:
        from afc_cli.costs import format_usd

        return {
            "rounds": self.rounds,
            "claimed": self.claimed,
            "finished": self.finished,
            "failed": self.failed,
            "spent": format_usd(self.spent_micros),
            "unknown_cost_attempts": self.unknown_cost_attempts,
            "stopped_by_signal": self.stopped_by_signal,
            "abandoned_attempts": self.abandoned,
            "stopped_by_budget": self.budget_hit,
            "budget": self.budget,
            "held_elsewhere": self.held_elsewhere,
            "awaiting_review": self.awaiting_review,
            "blocked": self.blocked,
            "exit_code": self.exit_code,
        }


def shared_host_id(ledger: Ledger, reporter: Any) -> None:
    """Said as a worker starts: live leases name this host's id from another process table
    (``Ledger.host_id_sharers``): another machine or container runs afc under the same
    AFC_HOST_ID (or host name), or this one restarted (a reboot, a new container) within a
    lease. Either way their jobs are left until their leases run out, never taken at once
    (``owner.sees_process``), so nothing is paid twice; but two machines under one id also
    share their spool holds' host in messages, and an older afc among them still takes the
    others' jobs at once, so each machine is best given its own id."""
    sharers = ledger.host_id_sharers() if reporter is not None else []
    if not sharers:
        return
    named = ", ".join(shown(owner) for owner in sharers[:3]) + (", ..." if len(sharers) > 3 else "")
    reporter.notice(
        f"jobs are leased to {len(sharers)} afc process(es) named {host_id()!r}, this host's "
        f"id, that are not of this machine's boot and pid namespace ({named}): another machine "
        "or container runs afc with the same AFC_HOST_ID (or host name), or this host restarted "
        "within a lease. Their jobs are left until their leases run out (nothing is paid "
        "twice); if another machine shares the id, give each machine its own AFC_HOST_ID"
    )


def work(
    *,
    ledger_path: str,
    batch: str | None = None,
    concurrency: int,
    claim: int | None = None,
    poll_s: float = DEFAULT_POLL_S,
    grace_s: float,
    until_idle: bool = False,
    reporter: Any = None,
    max_spend: str | None = None,
    allow_unpriced: bool = False,
    budget_name: str | None = None,
    storage: str | None = None,
) -> WorkerResult:
    from afc_cli.costs import RateCards
    from afc_cli.pipeline import dearest_known
    from afc_cli.run import (
        Budget,
        StoppedBeforeRun,
        batch_rates,
        lease_seconds,
        max_interrupts,
        min_free_bytes,
        named_storage,
        open_files,
        poll_seconds,
        require_keys,
        run_jobs,
        sweep_left,
    )
    from afc_cli.webhooks import check_secrets

    if concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    if not 0 < poll_s <= 3600:  # nan and inf too: the idle wait cannot take them
        raise UsageError(f"--poll must be a number of seconds > 0, at most 3600, got {poll_s}")
    claim = claim or max(4 * concurrency, 32)
    if not 1 <= claim <= MAX_CLAIM:
        # past a 64-bit integer the claim's LIMIT failed in the database driver, after the
        # checks, as "unexpected error: OverflowError (a bug in afc)", exit 1
        raise UsageError(f"--claim must be from 1 to {MAX_CLAIM}, got {claim}")
    lease_s = lease_seconds()
    if budget_name is not None and not budget_name.strip():
        # '--budget "$NIGHT"' with the variable unset: taken as the default 'workers', the
        # worker's spend joined that never-reset budget instead of starting one of its own
        raise UsageError(
            "--budget is empty: name the shared budget (--budget nightly-2026-12-01), or leave "
            "the option out for the default one, workers"
        )
    budget = Budget.parse(max_spend, allow_unpriced)
    if budget is None and budget_name is not None:
        # the cap is each worker's --max-spend, not kept in the ledger: a name alone would
        # run this worker uncapped, its spend not even counted against that budget's cap
        raise UsageError(
            f"--budget {budget_name} names a shared --max-spend: give --max-spend USD too "
            "(a worker without one is not capped, and its spend does not count toward that "
            "budget)"
        )
    budget_name = budget_name or "workers"
    # One budget for every worker started with the same name on this ledger: their attempts
    # share a run id, whose spend (known costs, else reservations) the cap holds, checked and
    # reserved one attempt at a time across hosts (Ledger.start_attempt).
    run_id = f"{SHARED_BUDGET}{budget_name}" if budget is not None else None
    # what each model's answers have cost per image asked for, kept across this worker's
    # rounds (run_jobs ``dearest``): a round reserves at least that, as one run does
    dearest: dict[tuple, Fraction] = {}
    # the batches whose uploads a store refused, and until when, kept across the rounds as
    # one run keeps them (run_jobs ``denied``): a round knowing of no refusal paid for renders
    # a refusing store would not take
    denied: dict[str, Any] = {}
    # the batches whose answers in the ledger it has learnt that from (``check``)
    learnt: set[str] = set()
    max_interrupts()
    min_free_bytes()
    poll_seconds()
    open_files(concurrency)

    # --storage names where this worker's outputs go, as for 'afc resume': a batch bound to
    # another storage is refused, both named (UsageError), before its jobs run
    named = named_storage(storage)

    def held_to_storage(batches: set[str]) -> None:
        for name in sorted(batches) if named else ():
            ledger.check_storage(name, named)

    def check(jobs: list[dict[str, Any]]) -> None:
        """What a claim must pass before its jobs run: every provider's key is set here, and
        every webhook secret their events are signed with (as 'afc resume' checks: a worker
        without it ran the jobs and left their events pending for ever, saying nothing), and
        under a budget every chain is priced (UsageError otherwise)."""
        held_to_storage({job["batch"] for job in jobs})  # one admitted since the start too
        chains = [(job["batch"], json.loads(job["request_json"])["chain"]) for job in jobs]
        providers = {entry["provider"] for _, chain in chains for entry in chain}
        require_keys(providers)
        open_files(concurrency, providers)  # room for a socket per call in each of their pools
        check_secrets(ledger, [job["id"] for job in jobs])
        if budget is not None:
            cards = batch_rates(ledger)
            budget.check_priced(chains, lambda b, cards=cards: cards.get(b) or RateCards())
            # what the ledger's answers of a batch met for the first time already cost, as a
            # submit's or a resume's budget starts from (``dearest_known``): a worker started
            # each night reserved only the estimates again, its first wave past the cap
            fresh = {job["batch"] for job in jobs} - learnt
            learnt.update(fresh)
            for key, per_image in dearest_known(ledger, fresh, cards).items():
                if per_image > dearest.get(key, 0):
                    dearest[key] = per_image

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    result = WorkerResult(until_idle=until_idle)
    ledger = Ledger(ledger_path, create=False, check=True)
    stop = Stop()
    saved = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
    try:
        ledger.require_batch(batch)
        if run_id is not None:
            result.budget_at_start = ledger.run_spend(run_id)
        # the batches it may run: one bound elsewhere whose jobs have all ended is not this
        # worker's concern (a long-lived ledger's old batches on an old bucket refused every
        # worker naming the new one); a job retried there later is checked at its claim
        held_to_storage(set(ledger.unfinished_batches()) if batch is None else {batch})
        # a worker restarted after a crash: the spool files of successes it left go now, not
        # at its first claim, which an idle ledger may not give it for days
        sweep_left(ledger)
        shared_host_id(ledger, reporter)

        def refuse_moved() -> None:
            """``Ledger.refuse_moved``, once a copy under way into this ledger (a worker
            started on the new, empty ledger before 'afc ledger copy' into it) has opened it:
            in the moment between the copy's commit and its marking the source moved, the
            copy refuses every run, and the worker stopped (exit 2) saying the copy did not
            finish and to run it again, though it finished a moment later."""
            deadline = time.monotonic() + COPY_OPEN_WAIT_S
            while time.monotonic() < deadline and not stop.is_set():
                moved = ledger.moved_to()
                if moved is None or unfinished_copy_source(moved["destination"]) is None:
                    break
                stop.wait(0.1)
            ledger.refuse_moved()

        def dependents_failed(jobs: list[dict[str, Any]]) -> None:
            """Jobs this worker's look failed (their need ended badly): ended by this worker,
            counted and said as the jobs its runs end are."""
            result.finished += len(jobs)
            result.failed += len(jobs)
            for job in jobs if reporter is not None else ():
                reporter.notice(
                    f"{job['batch']}/{job['key']}: ended failed: DEPENDENCY_FAILED: {job['error']}"
                )

        settle = Settle(ledger, batch, failed=dependents_failed)

        def claim_now() -> list[dict[str, Any]]:
            ledger.check_schema()  # a newer afc migrated it meanwhile: stop, nothing in flight
            refuse_moved()  # 'afc ledger copy' moved its work elsewhere: the same
            try:
                settle()
                jobs = ledger.claim_runnable(claim, lease_s, batch=batch, settle=False)
            except Exception:
                # migrated between that look and this claim, or the look for blocked jobs
                # before it (they are not one transaction): on PostgreSQL the prepared claim,
                # or the look's read of a job's row, fails ('cached plan must not change
                # result type'); the migration is the reason, said as above (exit 2), not a bug.
                # One still under way, whose lock on jobs the claim waited for past
                # lock_timeout, is said as such (exit 2), not as a psql session left open
                ledger.refuse_migrating()
                ledger.check_schema()
                raise
            if jobs and ledger.newer_migrations():
                # the claim waited for a newer afc's migration (its lock on jobs, held for as
                # long as it runs) after the look above read the migrations committed before
                # it, and took the jobs free once it committed: given back unrun, and stop
                # (exit 2), as a refill's claim does; run, they were paid for by this older
                # code on the newer schema
                for job in jobs:
                    ledger.release(job)
                ledger.check_schema()
            if jobs and ledger.moved_to() is not None:
                # a copy landed here between that look and the claim (its jobs and its own
                # row commit together, so the claim's rows came with it): not run while the
                # source may still run them; the next round looks again
                for job in jobs:
                    ledger.release(job)
                return []
            return jobs

        holders_said: set[str] = set()
        # a retryable storage check failing round after round: since when (monotonic), and
        # when it was last said (``STORAGE_DOWN_SAY_S``)
        storage_down: float | None = None
        storage_said = 0.0

        def waiting_on() -> None:
            """--until-idle with jobs left that other processes hold (another worker's, a
            host's spool hold): said, with the holders, when they change, not at every poll.
            It polled in silence until they ended, for hours maybe, and a person could not
            tell it from a hang."""
            holders = ledger.lease_holders(batch) if reporter is not None else {}
            if not holders or set(holders) == holders_said:
                return
            holders_said.clear()
            holders_said.update(holders)
            named = ", ".join(
                f"{n} by {host_of(owner)}'s spool hold"
                if is_host_lease(owner)
                else f"{n} by {shown(owner)}"
                for owner, n in sorted(holders.items())
            )
            reporter.notice(
                f"waiting for {sum(holders.values())} job(s) other processes hold ({named}): "
                "--until-idle exits once no job is left to run"
            )

        def idle(runnable: list[str]) -> bool:
            """Nothing left that a round of this worker can end: no runnable job, or (with
            --batch) only jobs waiting on an output key a job of another batch holds with a
            paid render, which only a run of that batch stores (``Ledger.held_elsewhere``):
            said, counted, and exit 1, as ``afc resume --batch`` leaves such a job waiting."""
            held = ledger.held_elsewhere(batch) if runnable and batch is not None else None
            result.held_elsewhere = len(held or ())
            if held is None:
                if runnable:
                    waiting_on()
                return not runnable
            for job in held if reporter is not None else ():
                reporter.notice(
                    f"job {job['key']!r} of batch {batch!r} waits: "
                    + job["held"].said(job["output_key"])
                )
            return True

        while not stop.is_set():
            jobs = claim_now()
            if not jobs:
                # a copy that waited for this claim may have moved the ledger meanwhile: its
                # outbox is the destination's to send now
                refuse_moved()
                if ledger.deliveries_due():  # none due: nothing is started for nothing
                    jobs = drain_while_idle(ledger, stop, poll_s, claim_now)
            if stop.is_set():  # a signal during the claim or the drain: nothing of it runs
                for job in jobs:
                    ledger.release(job)
                break
            if not jobs:
                runnable: list[str] = []
                if until_idle:
                    # less the jobs held from a model that refused this worker's key: nothing
                    # a round can end until it is fixed (``Ledger.pause_claims``' ``idle``)
                    paused = ledger.paused_idle()
                    runnable = ledger.runnable_job_ids(batch=batch, include_blocked=False)
                    runnable = [job_id for job_id in runnable if job_id not in paused]
                if until_idle and idle(runnable):
                    # a look before saying so, whenever it was last made: jobs its last look
                    # had not seen ready yet are claimed next. Made only then: a worker
                    # waiting for another process's jobs made one at every poll
                    if settle(force=True):
                        continue
                    result.idle = True
                    # idle, exit 0, is not the batch done: a script's log said '0 finished' of
                    # a style frame awaiting review and the shots blocked behind it
                    for _, status, count in ledger.status_counts(batch):
                        if status == "awaiting_review":
                            result.awaiting_review += count
                        elif status == "blocked":
                            result.blocked += count
                    break
                stop.wait(poll_s)
                continue
            try:
                check(jobs)
            except UsageError:
                for job in jobs:  # not ours to run: left for a worker that has the key
                    ledger.release(job)
                raise
            result.rounds += 1
            result.claimed += len(jobs)
            opened = batch_settings(ledger)  # what run_jobs opens and reads
            refill = Refill(
                ledger, claim, lease_s, batch, opened, check, stop, result, reporter, settle
            )
            try:
                stats = run_jobs(
                    ledger,
                    [job["id"] for job in jobs],
                    concurrency=concurrency,
                    reporter=reporter,
                    lease_s=lease_s,
                    grace_s=grace_s,
                    budget=budget,
                    run_id=run_id,
                    more=refill,
                    more_every=poll_s,  # the claims it would make idle, made in its round
                    stopped=stop.is_set,
                    dearest=dearest,
                    denied=denied,
                )
            except StoppedBeforeRun:
                # a SIGTERM while the storage was checked before the loop (a bucket's HEAD
                # that hangs): nothing of the claim ran, and its jobs go back at once, counted
                # claimed as those of a signal just before the loop are (its drain gives them
                # back); the worker stops now rather than once the check ends, minutes later
                for job in jobs:
                    ledger.release(job)
                break
            except LedgerError:
                # a newer afc migrated the ledger after this round's claim looked (during the
                # storage's check, the round's reads before the run), and the run's own look
                # before its first call (``check_schema(wait=True)``) stopped it, exit 2,
                # nothing called: its jobs are given back, as a claim's are. Left leased to
                # the stopped worker, another host's worker waited out the lease to run them
                with contextlib.suppress(AfcError):
                    if ledger.newer_migrations():
                        for job in jobs:
                            ledger.release(job)
                raise
            except (StorageError, UsageError) as exc:
                # the storage check before the loop (a bucket's HEAD): nothing of the claim
                # ran, and its jobs go back at once rather than stay leased to a worker that
                # is gone; a retryable error (a 5xx) is tried again at the next poll
                for job in jobs:
                    ledger.release(job)
                # nor is it counted as claimed: an hour's outage at the default --poll
                # counted 1,800 rounds of jobs given back unrun in the worker's summary
                result.rounds -= 1
                result.claimed -= len(jobs)
                if isinstance(exc, UsageError) or not exc.retryable:
                    raise
                now = time.monotonic()
                if reporter is not None and (
                    storage_down is None or now - storage_said >= STORAGE_DOWN_SAY_S
                ):
                    lasted = (
                        f" (failing for {now - storage_down:.0f} s)"
                        if storage_down is not None
                        else ""
                    )
                    reporter.notice(
                        f"{exc.message}; trying again every {poll_s:g} s{lasted}, said again "
                        f"every {STORAGE_DOWN_SAY_S:g} s while it fails"
                    )
                    storage_said = now
                if storage_down is None:
                    storage_down = now
                stop.wait(poll_s)
                continue
            if storage_down is not None:
                if reporter is not None:
                    lasted = time.monotonic() - storage_down
                    reporter.notice(
                        f"the storage check passes again, after {lasted:.0f} s of failures"
                    )
                storage_down = None
            result.finished += stats.finished
            result.failed += stats.ended_badly
            result.cancelled += stats.cancelled
            result.spent_micros += stats.spent_micros
            result.unknown_cost_attempts += stats.unknown_cost_attempts
            result.abandoned += stats.abandoned
            if stats.budget_hit:
                result.budget_hit = True
                break
            if stats.interrupted:
                stop.set()
        result.stopped_by_signal = stop.is_set()
        if budget is not None:
            from afc_cli.costs import format_usd

            # each round's figures were the whole budget's so far (its run id is shared by
            # every worker of the budget): this worker's own are the attempts it started
            own = ledger.run_money(run_id, owner=ledger.owner)
            # not a render another worker of the budget counted as it stopped, which this
            # one only polled to its end: summed, the workers' lines counted it twice
            result.spent_micros = own["priced"] - ledger.adopted_counted(run_id, ledger.owner)
            result.unknown_cost_attempts = own["unknown_cost"]
            money = ledger.run_money(run_id)
            result.budget_at_end = ledger.run_spend(run_id)
            result.budget = {
                "name": budget_name,
                "cap": format_usd(budget.cap_micros),
                "priced": format_usd(money["priced"]),
                # the budget's attempts of unknown cost, every worker's: beside its priced
                # figure, never in it (as this worker's own ``unknown_cost_attempts``)
                "unknown_cost_attempts": money["unknown_cost"],
                "reserved": format_usd(money["reserved"]),
            }
        return result
    finally:
        ledger.close()
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        stop.close()
