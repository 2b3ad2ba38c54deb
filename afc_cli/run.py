"""Running jobs: admission (submit), the run loop (submit and resume), and its result.

Jobs run concurrently on one asyncio loop: provider calls are long waits, so hundreds in flight
cost coroutines, not threads. The ledger connection belongs to the loop's thread; blocking file
work (fsync, hashing) goes to the file helper process (afc_cli/offload.py) for file:// storage,
to threads otherwise. A semaphore of ``concurrency`` slots bounds the
jobs doing work at once; a job waiting out a backoff gives its slot back.

Interruption (``Interruption``): the first Ctrl-C or SIGTERM stops the run gracefully. No new
provider call starts; calls in flight finish within the grace period (``--grace``,
``AFC_GRACE_S``, default 30 s) and their outputs are spooled, stored and recorded; a job-style
request already submitted (Replicate, fal) is left to the next run, which polls it by id; then
the leases are released and the run ends with exit 130. A second signal, or the grace running
out, abandons what is still in flight: those attempts are recorded ``unknown`` (possibly paid).
A third signal exits at once. Every job stays resumable throughout.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import queue
import shlex
import signal
import threading
import uuid
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from afc_cli import ledger_file, streams
from afc_cli import storage as storage_mod
from afc_cli.costs import TOKEN_RATES, RateCards, cap_micros, plural
from afc_cli.errors import (
    EXIT_BUDGET,
    EXIT_CONFLICT,
    EXIT_INTERRUPTED,
    EXIT_JOB_FAILED,
    EXIT_OK,
    STOP_SIGNALS,
    AfcError,
    LedgerWriteError,
    ManifestError,
    SpoolError,
    StorageError,
    UsageError,
    first_named,
    named_batches,
)
from afc_cli.ledger import TERMINAL, AdmitResult, Ledger
from afc_cli.ledger.core import fail_point
from afc_cli.listing import paused_reasons
from afc_cli.owner import awake_clock
from afc_cli.pipeline import (
    MAX_INTERRUPTS,
    SPOOL_SLOTS,
    ProviderLimit,
    RunContext,
    Slots,
    check_storage,
    count_adoptions,
    dearest_known,
    keep_rendered,
    note_stores_first,
    run_job,
    store_kept,
)
from afc_cli.spool import OWNER_FILE, Spool

if TYPE_CHECKING:
    from fractions import Fraction

DEFAULT_CONCURRENCY = 8
DEFAULT_GRACE_S = 30.0
# how long a stopping run waits for the fetch of a polled request's ready result (Replicate's,
# fal's: rendered and billed) before leaving it to the next run to poll by id (``drain``)
FETCH_WAIT_S = 10.0
LEASE_S = 300.0
# Jobs in their storage steps at once (store, verify), apart from --concurrency, which bounds
# paid provider calls. Storage work costs nothing at the provider, and its latency is fsyncs
# and uploads that overlap well: a 10,000-job run of instant renders measured ~40% faster with
# 64 than with 8. (Spool writes have slots of their own: pipeline.SPOOL_SLOTS.)
STORE_SLOTS = 64
# How long the file helper's calls may go on once every job of the run has ended (those of
# jobs a stopping run cancelled): then it is killed (``FileWorker.close``)
HELPER_CLOSE_S = 5.0
# How long a run stopped by a broken ledger may spend storing the renders it kept in the spool
# (``pipeline.store_kept``), at the least (the grace period when that is longer)
KEPT_STORE_S = 10.0
DEFAULT_MIN_FREE_MB = 64


class Reporter:
    """Told about progress; the CLI shows it as a live progress line or as plain lines.

    Events (``afc_cli/pipeline.py``): ``started``, ``attempt`` (a provider call begins),
    ``attempt_failed`` and ``rendered`` (``cost_micros`` in ``info``), ``waiting``
    (``reason``, and ``until`` — the wall-clock time of the next try — when it is known),
    ``ended`` (detail: the job's status). ``state`` says what the whole run is doing when that
    is not rendering (e.g. draining before an exit); None clears it."""

    def begin(self, total: int, *, cap_micros: int | None = None) -> None:
        pass

    def event(self, job: dict[str, Any], event: str, detail: str, **info: Any) -> None:
        pass

    def state(self, message: str | None) -> None:
        pass

    def notice(self, message: str) -> None:
        """Something the person watching should know that is no job's event and no state of
        the run: a provider whose polls have all been failing for a while, and its end."""

    def stopping(self, grace_s: float, in_flight: int, why: str | None = None) -> None:
        """The run was asked to stop (``why``, when not a signal): it starts no new call and
        waits up to ``grace_s`` for the ``in_flight`` jobs in a call or in their storage
        work."""

    def abandoning(self, why: str, in_flight: int, storing: int = 0) -> None:
        """The run stops waiting (``why``) and abandons what is still in flight."""

    def end(self) -> None:
        pass

    def exiting(self) -> None:
        """The process exits at once (a third signal, ``Interruption``): no ``end``, and
        nothing may wait for the reader (a terminal paused with Ctrl-S)."""


@dataclass(frozen=True)
class Budget:
    """A run's spending cap (``--max-spend`` or the manifest's ``budget``)."""

    cap_micros: int
    allow_unpriced: bool = False
    # where the cap was set, as its errors name it: the option, or the manifest's field
    source: str = "--max-spend"

    @classmethod
    def parse(
        cls, value: str | None, allow_unpriced: bool, source: str = "--max-spend"
    ) -> Budget | None:
        if value is None:
            return None
        from afc_cli.costs import cap_problem

        problem = cap_problem(value)
        if problem:
            raise UsageError(f"--max-spend (or the manifest's budget) {problem}")
        return cls(cap_micros(Decimal(value)), allow_unpriced, source)

    @classmethod
    def of_manifest(
        cls, max_spend: str | None, manifest: Any, allow_unpriced: bool
    ) -> Budget | None:
        """The budget a submit of ``manifest`` runs under, and its plan shows: ``--max-spend``
        when given, else the manifest's ``budget``, else none."""
        if max_spend is not None:
            return cls.parse(max_spend, allow_unpriced)
        return cls.parse(manifest.budget, allow_unpriced, f"{manifest.path}: field 'budget'")

    def check_priced(self, chains: list[tuple[str, list[dict[str, Any]]]], rates) -> None:
        """Refuse unpriced models under a budget unless --allow-unpriced: a cap cannot hold
        over spend it cannot estimate."""
        if self.allow_unpriced:
            return
        # each unpriced model with the batches whose rate cards lack it: a resume or a
        # worker runs many batches, and a worker service stopped (exit 2) by a batch admitted
        # without a card for its model named the model alone, not the manifest to fix
        unpriced: dict[str, set[str]] = {}
        for batch, chain in chains:
            for entry in chain:
                if rates(batch).estimate(entry["provider"], entry["model"]) is None:
                    unpriced.setdefault(f"{entry['provider']}/{entry['model']}", set()).add(batch)
        if unpriced:
            raise UsageError(
                f"{self.source}: a budget needs a per-image rate card for every model that may "
                "run; unpriced: "
                + ", ".join(
                    f"{model} ({named_batches(unpriced[model], shown=3)})"
                    for model in sorted(unpriced)
                )
                + ". Add rates, or pass --allow-unpriced (their spend is then not capped)."
            )


class RunThreads(concurrent.futures.ThreadPoolExecutor):
    """The run loop's threads (``asyncio.to_thread``: spool writes without the file helper,
    the ledger's WAL syncs, name lookups), and apart from them the storage's (S3 calls, a
    job's input reads: ``RunContext.network``), so a store that stalls its uploads (120 s a
    try) never holds the commit sync that lets a paid call start, or a signal be acted on
    (``Interruption.signalled``), behind them. Daemon threads, and once the run abandoned its calls (a
    second signal, the grace running out) its end no longer waits for them. asyncio's own pool
    was joined by ``asyncio.run`` and again at the interpreter's exit, so an S3 upload that
    stalled (read timeout 120 s a try, a big output on a slow link longer) held an abandoned
    run's exit 130 for as long as it took, deaf to the second signal. A storage call cut off
    so stored nothing, or an object the next run finds at its key and adopts (a multipart
    upload's parts are aborted by that key's next completion). Only ``submit`` and
    ``shutdown`` are used (asyncio's contract); ThreadPoolExecutor is subclassed because
    ``loop.set_default_executor`` accepts nothing else."""

    def __init__(self, max_workers: int):
        super().__init__(max_workers=1)  # its own machinery is never started
        self.most = max_workers
        self.work: queue.SimpleQueue = queue.SimpleQueue()
        self.idle = threading.Semaphore(0)
        self.threads: list[threading.Thread] = []
        self.guard = threading.Lock()
        self.closed = False
        self.abandoned = False

    def submit(self, fn, /, *args, **kwargs):
        with self.guard:
            if self.closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            future: concurrent.futures.Future = concurrent.futures.Future()
            self.work.put((future, fn, args, kwargs))
            if not self.idle.acquire(blocking=False) and len(self.threads) < self.most:
                thread = threading.Thread(
                    target=self._serve, name=f"afc-run-{len(self.threads)}", daemon=True
                )
                thread.start()
                self.threads.append(thread)
            return future

    def _serve(self) -> None:
        while (item := self.work.get()) is not None:
            future, fn, args, kwargs = item
            del item
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:  # noqa: BLE001 - handed to the caller
                    future.set_exception(exc)
                else:
                    future.set_result(result)
                    del result
            del future, fn, args, kwargs
            self.idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self.guard:
            self.closed = True
            threads = list(self.threads)
        for _ in threads:
            self.work.put(None)
        if wait and not self.abandoned:
            for thread in threads:
                thread.join()


@dataclass
class RunStats:
    ran: int = 0
    budget_hit: bool = False
    spent_micros: int = 0  # priced: the known costs of this run's attempts (costs report's)
    unknown_cost_attempts: int = 0  # this run's attempts whose cost is unknown, shown apart
    reserved_micros: int = 0  # the budget's reservations for those
    # of ``spent_micros``, the known cost of requests an earlier run left rendering, which
    # this run polled to their end (``RunContext.adopted``): no reservation of this run's
    # held them, so a budget's spend may pass its cap by them (README "Budget")
    adopted_micros: int = 0
    # of ``spent_micros`` (the adopted requests apart), the known cost of attempts of models
    # without a per-image price (``--allow-unpriced``): they reserved nothing, so a budget's
    # spend passes its cap by them, and not because a priced answer cost more than reserved
    unreserved_micros: int = 0
    # whether the run's attempts that reserved an estimate include a token card's (``past_cap``)
    token_priced: bool = False
    interrupted: bool = False  # a signal stopped the run (exit 130)
    finished: int = 0  # jobs this run brought to a terminal state
    ended_badly: int = 0  # of those, the ones that ended failed, dead or cancelled
    cancelled: int = 0  # of those, the cancelled ones
    abandoned: int = 0  # attempts left in flight at the end (recorded unknown)


@dataclass
class RunResult:
    """What a submit or resume did, and the exit code it earns."""

    jobs: list[dict[str, Any]] = field(default_factory=list)  # status rows of requested jobs
    admit: AdmitResult | None = None
    stats: RunStats = field(default_factory=RunStats)
    budget: Budget | None = None
    # resume: failed or dead-lettered jobs in its scope that this run did not touch; they wait
    # for a person ('afc retry'), so the run does not report success while they exist
    stuck: list[dict[str, Any]] = field(default_factory=list)
    # submit: unfinished jobs of the batch that the manifest no longer lists (run with it)
    unlisted: list[str] = field(default_factory=list)
    # the scope's webhook events not delivered when the run ended: {"pending": n, "dead": n}
    webhooks: dict[str, int] = field(default_factory=dict)
    # what its jobs awaiting review or blocked wait for, by job id, as 'afc status' says it
    # (``listing.paused_reasons``): its --json's ``waiting``
    paused: dict[str, str] = field(default_factory=dict)

    @property
    def ran(self) -> int:
        return self.stats.ran

    @property
    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for row in self.jobs:
            counts[row["status"]] = counts.get(row["status"], 0) + 1
        return counts

    @property
    def exit_code(self) -> int:
        if self.stats.interrupted:
            return EXIT_INTERRUPTED
        if self.admit is not None and self.admit.conflicts:
            return EXIT_CONFLICT
        if any(row.get("error_code") == "IDEMPOTENCY_CONFLICT" for row in self.jobs):
            return EXIT_CONFLICT  # found by the probe: storage holds the key's earlier request
        if self.stats.budget_hit:
            return EXIT_BUDGET
        # a job paused for a person's review, or blocked behind one, is not a failure: a review
        # may take days, and cron must not report it every few minutes (queue stats alerts on
        # a stale review: oldest_review_age_seconds)
        if self.stuck or any(row["status"] not in PAUSED for row in self.jobs):
            return EXIT_JOB_FAILED
        return EXIT_OK


def named_storage(value: str | None) -> str | None:
    """A ``--storage`` value as recorded (``storage_mod.normalize_url``), None when the option
    was not given. An empty one (``--storage "$AFC_BUCKET"``, the variable left unset in a
    script) is refused (exit 2), as an empty ``--ledger=`` is: read as no storage named, the
    batch was rendered, paid for and bound to the manifest's storage or the default folder on
    this machine's disk, and the run naming the bucket afterwards refused as another storage.
    An empty ``AFC_STORAGE`` reaches here as None (click reads an empty variable as unset)."""
    if value is None:
        return None
    if not value.strip():
        raise UsageError(
            "--storage is empty: name the storage, file://PATH or s3://BUCKET/PREFIX, or leave "
            "the option out (the manifest's storage, else file://./afc-outputs)"
        )
    return storage_mod.normalize_url(value)


def resolve_storage(
    cli_storage: str | None, manifest_storage: str | None, base: Path, manifest_path: str = ""
) -> str | None:
    """The storage named explicitly (command line or AFC_STORAGE over the manifest), or None.
    A manifest's storage that is no usable URL is a manifest error naming the file and the
    field, as every other manifest error does (it read as if --storage had named it)."""
    if cli_storage is not None:
        return named_storage(cli_storage)
    if manifest_storage:
        # relative file:// paths in a manifest are relative to the manifest's folder
        try:
            return storage_mod.normalize_url(manifest_storage, base=base)
        except UsageError as exc:
            said = exc.message.removeprefix("storage: ").removeprefix("storage ")
            raise ManifestError(manifest_path, [f"field 'storage': {said}"]) from None
    return None


def _admit(ledger: Any, manifest: Any, storage: str, rates: Any, endpoint: str | None) -> Any:
    """``Ledger.admit``, whose failure to write (a full disk, a lock held past its wait, a
    lost PostgreSQL connection) says what a failed admission needs: it is one transaction,
    so nothing of the manifest was admitted, and the submit is what to run again ('afc
    resume', a run's fix, runs no job the manifest would have added)."""
    import sqlite3

    from afc_cli.errors import unwritten

    try:
        return ledger.admit(manifest, storage, rates, endpoint)
    except (LedgerWriteError, sqlite3.Error) as exc:
        written = unwritten(exc, getattr(ledger, "path", None))
        if written is None or not hasattr(written, "failed"):
            raise
        raise LedgerWriteError(
            f"{written.failed}: nothing of {manifest.path} was admitted (its admission is one "
            f"transaction): {written.fix}, then run this submit again"
        ) from None


def submit(
    manifest_path: str,
    *,
    ledger_path: str,
    storage: str | None,
    concurrency: int,
    run: bool = True,
    reporter: Reporter | None = None,
    max_spend: str | None = None,
    allow_unpriced: bool = False,
    grace_s: float = DEFAULT_GRACE_S,
    report_jobs: bool = True,
) -> RunResult:
    """Admit a manifest's jobs and run them (``run``). ``report_jobs=False`` leaves the jobs'
    status rows out of the result (an admission of 100,000 jobs spent a second reading them
    back), for a caller that shows none (``submit --no-run -q``)."""
    # imported here, not with this module: resume and worker, which read no manifest, need
    # neither it nor pydantic and YAML (a fifth of their start-up)
    from afc_cli.manifest import load_manifest

    # everything that can refuse the run is checked before the ledger is even opened
    manifest = load_manifest(manifest_path)
    named = resolve_storage(
        storage, manifest.storage, Path(manifest_path).resolve().parent, str(manifest_path)
    )
    rates = manifest_rates(manifest)
    budget = Budget.of_manifest(max_spend, manifest, allow_unpriced)

    def keys_set(chains: list[list[dict[str, Any]]]) -> None:
        require_keys({entry["provider"] for chain in chains for entry in chain})

    def priced(chains: list[list[dict[str, Any]]]) -> None:
        if budget is not None:
            budget.check_priced([(manifest.batch, chain) for chain in chains], lambda b: rates)

    # Under a budget the rate cards, and the API keys, of the manifest's models. One that is
    # missing is decided again once the ledger is read, over the jobs a run may render only:
    # a replay of a finished job calls no provider (``refused``; a new ledger runs them all).
    refused = []
    if run:
        for check in (priced, keys_set):
            try:
                check(manifest.chains)
            except UsageError:
                refused.append(check)
        max_interrupts()  # a bad AFC_MAX_INTERRUPTS refuses the run before anything is written
        lease_seconds()
        min_free_bytes()  # a bad AFC_MIN_FREE_MB is refused before anything is written
        poll_seconds()
        open_files(concurrency, {entry["provider"] for chain in manifest.chains for entry in chain})
    if run:
        from afc_cli.webhooks import require_secrets

        require_secrets(manifest.secret_envs, f"{manifest.path}: field 'webhook.secret_env'")
    # An existing ledger is read first (its identity, its pages, the batch's storage); a new one
    # is created only once the storage and spool checks have passed: a refused run writes
    # nothing.
    if ledger_file.is_postgres(ledger_path):
        # a database server, not a file: opening it applies the schema, never a job. A
        # missing API key or price is refused first in a database afc has not written yet
        # (every job is new there), as in a new SQLite ledger: it stays empty
        from afc_cli.ledger.postgres import holds_ledger

        if refused and not holds_ledger(ledger_path):
            for check in refused:
                check(manifest.chains)
        path = ledger_path
        ledger = Ledger(ledger_path)
    else:
        path = ledger_file.ledger_path(ledger_path)
        ledger = (
            Ledger(path, create=False, check=run) if ledger_file.holds_something(path) else None
        )
    try:
        if ledger is None:
            for check in refused:  # every job is new: it refuses as before
                check(manifest.chains)
            ledger_file.precheck(path)
        else:
            ledger.refuse_moved()  # its work is in another ledger now: nothing here, not --no-run
        bound = ledger.check_storage(manifest.batch, named) if ledger is not None else None
        chosen = named or bound or storage_mod.normalize_url(storage_mod.DEFAULT_STORAGE)
        endpoint = storage_mod.endpoint_of(chosen)
        if ledger is not None:  # the batch's bucket through another endpoint: refused too
            ledger.check_storage(manifest.batch, None, endpoint)
        # Every unfinished job of the batch runs, as `afc resume` (cron) would run it: also a
        # job admitted by an earlier manifest and left out of this one (it is still part of
        # the batch; 'afc cancel' drops a job), named in the result so it is not run unseen,
        # and checked as the manifest's own jobs are, before anything is written. A key this
        # manifest changed is listed (refused as a conflict): its admitted request is what the
        # user just edited away, and this command does not pay for it. Admission adds none of
        # these (it writes the manifest's jobs only), so they are read before it.
        shown = run or report_jobs  # a quiet --no-run reads no job rows (100,000-job lists)
        left = _unlisted_jobs(ledger, manifest) if shown and ledger is not None else []
        if run:
            unlisted_chains = [json.loads(job["request_json"])["chain"] for job in left]
            # a PostgreSQL ledger's spool is marked by the runs that may render (own_spool)
            marked = ledger is not None and ledger.spool_identity() is not None
            # the jobs' chains read once, for the checks and the spool: only when needed (a
            # lookup of the batch's ended jobs, a 100,000-job list's too)
            to_run = _chains_to_run(manifest, ledger, bool(refused)) if refused or marked else []
            for check in (priced, keys_set):
                if check in refused:
                    check([*to_run, *unlisted_chains])
                elif unlisted_chains:
                    check(unlisted_chains)
            if left:
                # their webhooks' secrets too, as 'afc resume' checks them before running them
                from afc_cli.webhooks import require_secrets

                keys = sorted(job["key"] for job in left)
                require_secrets(
                    ledger.webhook_secret_names([job["id"] for job in left]),
                    f"the unfinished job(s) of batch {manifest.batch!r} not in {manifest.path}"
                    f", which this submit runs too ({first_named(keys, 5)})",
                )
            store = storage_mod.open(chosen)
            if ledger is not None:
                refuse_gone(ledger, manifest.batch, store)
            check_storage(store)  # before admitting or paying for anything
            if ledger is not None:  # another host's folder of the batch: refused unwritten
                hold_folder(ledger, manifest.batch, store, store.folder_mark())
            # a job the ledger holds stores to the output key it was admitted with: one whose
            # changed template is refused as a conflict never writes the manifest's new key
            # (checked, a new key inside its stored output refused the whole submit)
            admitted = ledger.admitted_output_keys(manifest.batch) if ledger is not None else {}
            store.check_keys(
                [admitted.get(job.key, job.output_key) for job in manifest.jobs]
                + [job["output_key"] for job in left]
            )
            spool = Spool(ledger.spool_root()) if ledger is not None else Spool.beside(path)
            check_spool(spool, per_host=ledger is not None and ledger.SPOOL_PER_HOST)
            if marked:
                # a replay of ended jobs renders nothing: it leaves another's spool alone
                own_spool(ledger, spool, running=bool(left or to_run))
        if ledger is None:
            ledger = Ledger(path)
        admitted = _admit(ledger, manifest, chosen, rates, endpoint)
        unlisted = sorted(job["key"] for job in left)
        keys = {*admitted.admitted_keys, *unlisted}
        stats = RunStats()
        if run:
            pending = ledger.runnable_job_keys(batch=manifest.batch)
            job_ids = [job_id for key, job_id in pending.items() if key in keys]
            stats = run_jobs(
                ledger,
                job_ids,
                concurrency=concurrency,
                reporter=reporter,
                budget=budget,
                grace_s=grace_s,
                checked=frozenset({manifest.batch}),
                spool_checked=True,
            )
        rows = []
        if report_jobs:
            rows = [r for r in ledger.status_rows(manifest.batch) if r["key"] in keys]
            note_held_elsewhere(ledger, rows)
        return RunResult(
            jobs=rows,
            admit=admitted,
            stats=stats,
            budget=budget,
            unlisted=unlisted,
            webhooks=ledger.delivery_counts(manifest.batch) if run else {},
            paused=paused_reasons(ledger, rows),
        )
    finally:
        if ledger is not None:
            ledger.close()


def _chains_to_run(
    manifest: Any, ledger: Ledger | None, changed: bool = False
) -> list[list[dict[str, Any]]]:
    """The chains of the manifest's jobs that a submit may render: all of them, less those of
    jobs the ledger has ended or holds for review (a replay renders nothing). A job whose
    request changed is refused as a conflict, not rendered, so dropping it too is safe; and
    with ``changed`` (a check refused the manifest's chains) so is an unfinished one, whose
    admitted request this submit does not run either: its new model's API key or rate card,
    missing, refused the whole submit, the night's new jobs with it."""
    if ledger is None:
        return chains_except(manifest, set())
    finished = ledger.finished_job_keys(manifest.batch)
    if changed:
        finished |= ledger.changed_job_keys(manifest.batch, manifest.jobs)
    return chains_except(manifest, finished)


def chains_except(manifest: Any, finished: set[str]) -> list[list[dict[str, Any]]]:
    """The manifest's distinct chains, less those only jobs keyed in ``finished`` have
    (``_chains_to_run``; ``afc plan`` reads the finished keys without opening the ledger)."""
    if not finished:
        return manifest.chains
    chains: dict[str, list[dict[str, Any]]] = {}
    for job in manifest.jobs:
        if job.key not in finished:
            chains.setdefault(repr(job.chain), job.chain)
    return list(chains.values())


def _unlisted_jobs(ledger: Ledger, manifest: Any) -> list[dict[str, Any]]:
    """The batch's unfinished jobs that the manifest does not list (admitted by an earlier
    one), as ledger rows."""
    listed = {job.key for job in manifest.jobs}
    pending = ledger.runnable_job_keys(batch=manifest.batch)
    return [ledger.job(job_id) for key, job_id in pending.items() if key not in listed]


def manifest_rates(manifest: Any) -> RateCards:
    """Rate cards of the config file (AFC_CONFIG), with the manifest's own winning."""
    from afc_cli.manifest import load_config_rates

    return RateCards.from_rates(load_config_rates(os.environ.get("AFC_CONFIG")) + manifest.rates)


def resume(
    *,
    ledger_path: str,
    batch: str | None,
    storage: str | None,
    concurrency: int,
    reporter: Reporter | None = None,
    max_spend: str | None = None,
    allow_unpriced: bool = False,
    grace_s: float = DEFAULT_GRACE_S,
) -> RunResult:
    budget = Budget.parse(max_spend, allow_unpriced)
    max_interrupts()  # a bad AFC_MAX_INTERRUPTS refuses the run before anything is written
    min_free_bytes()
    lease_seconds()
    poll_seconds()
    open_files(concurrency)
    ledger = Ledger(ledger_path, create=False, check=True)
    try:
        ledger.refuse_moved()
        ledger.require_batch(batch)
        named = named_storage(storage)
        job_ids = ledger.runnable_job_ids(batch=batch)
        batches = {b["name"] for b in ledger.batches()} if batch is None else {batch}
        if named:
            for name in sorted(batches):
                ledger.check_storage(name, named)
        from afc_cli.webhooks import check_secrets

        check_secrets(ledger, job_ids)
        chains = ledger.chains_of(job_ids)
        providers = {entry["provider"] for _, chain in chains for entry in chain}
        require_keys(providers)
        open_files(concurrency, providers)
        if budget is not None:
            cards = batch_rates(ledger)
            budget.check_priced(chains, lambda b: cards.get(b) or RateCards())
        stats = run_jobs(
            ledger,
            job_ids,
            concurrency=concurrency,
            reporter=reporter,
            budget=budget,
            grace_s=grace_s,
        )
        # the jobs it ran and the others that wait for a person, not every job of the ledger
        # (a cron'd resume of 410,000 finished jobs read them all, each with its cost: 9 s)
        wanted = set(job_ids)
        rows = ledger.status_rows_of(job_ids)
        note_held_elsewhere(ledger, rows)
        stuck = [r for r in ledger.status_rows(batch, STUCK) if r["id"] not in wanted]
        decided = follow_decisions(ledger, stuck)
        stuck = [r for r in stuck if r["id"] not in decided]
        return RunResult(
            jobs=rows,
            stats=stats,
            budget=budget,
            stuck=stuck,
            webhooks=ledger.delivery_counts(batch),
            paused=paused_reasons(ledger, rows),
        )
    finally:
        ledger.close()


STUCK = ("failed", "dead")  # statuses that wait for a person
DECIDED = ("rejected", "cancelled")  # a person's decisions, which resume passes by


def follow_decisions(ledger: Ledger, rows: list[dict[str, Any]]) -> set[str]:
    """The ids of the failed jobs among ``rows`` that are the consequence of a person's
    decision, not failures that wait for one: each failed with ``DEPENDENCY_FAILED``, and
    each of its needs that ended badly was rejected or cancelled, or is such a job itself.
    ``afc resume`` passes them by, as it passes the rejected or cancelled need by: a
    rejection is final ('afc retry' of its dependent fails it again at once; a new job under
    a new key replaces it), and a cron'd resume exited 1 at every run for ever after one
    rejection, with nothing a person could retry to clear it. A dependent of a need that
    failed for real, is dead or missing still waits for a person (retrying the need puts it
    back). Each job's needs are read once, walked with a list (a chain of a thousand shots,
    each the next one's reference, would pass Python's recursion limit, and a walk from each
    job to the chain's head would read a million needs)."""
    from afc_cli.ledger.core import ended_needs

    verdict: dict[str, bool] = {}
    ended: dict[str, list[dict[str, Any]]] = {}

    def candidate(job: dict[str, Any] | None) -> bool:
        return (
            job is not None
            and job["status"] == "failed"
            and job.get("error_code") == "DEPENDENCY_FAILED"
        )

    known = {row["id"]: row for row in rows}
    # the candidates' needs in a few queries, not one each (``Ledger.needs_of_many``)
    prefetched = ledger.needs_of_many([row["id"] for row in rows if candidate(row)])

    for row in rows:
        if not candidate(row):
            verdict.setdefault(row["id"], False)
            continue
        stack = [row["id"]]
        while stack:
            job_id = stack[-1]
            if job_id in verdict:
                stack.pop()
                continue
            if job_id not in ended:
                needs = prefetched.get(job_id)
                ended[job_id] = ended_needs(ledger.needs_of(job_id) if needs is None else needs)
                # a need failed itself: its verdict first (needs form no cycle: admission
                # refuses one)
                later = [
                    n["need_id"]
                    for n in ended[job_id]
                    if n["status"] == "failed" and n["need_id"] not in verdict
                ]
                if later:
                    for need_id in later:
                        if not candidate(known.get(need_id) or ledger.job(need_id)):
                            verdict[need_id] = False
                        else:
                            stack.append(need_id)
                    continue
            bad = ended[job_id]
            verdict[job_id] = bool(bad) and all(
                n["status"] in DECIDED or (n["status"] == "failed" and verdict[n["need_id"]])
                for n in bad
            )
            stack.pop()
    return {row["id"] for row in rows if verdict.get(row["id"])}


PAUSED = ("succeeded", "awaiting_review", "blocked")  # statuses a run may end with, exit 0


def max_interrupts() -> int:
    """``AFC_MAX_INTERRUPTS``: how many of a job's attempts its runs' ends may cut off (each
    possibly paid) before it is dead-lettered for a person to look at."""
    return _env_number(
        "AFC_MAX_INTERRUPTS", MAX_INTERRUPTS, int, lambda n: n >= 1, "a whole number >= 1"
    )


def _env_number(
    name: str, default: Any, convert: Callable[[str], Any], ok: Callable[[Any], bool], what: str
) -> Any:
    """A setting from the environment: ``default`` when unset or blank, else ``convert`` of it,
    refused (exit 2, naming the variable and its value) unless ``ok`` accepts it."""
    value = os.environ.get(name)
    if value is None or not value.strip():
        return default
    try:
        number = convert(value)
    except ValueError:
        number = None
    if number is None or not ok(number):
        raise UsageError(f"{name} must be {what}, got {value!r}")
    return number


class Interruption:
    """What Ctrl-C, SIGTERM and SIGHUP mean while jobs run (see the module docstring): the
    first drains, the second (or the grace running out) abandons, the third exits at once."""

    def __init__(
        self,
        ctx: RunContext,
        tasks: dict[str, asyncio.Task],
        grace_s: float,
        reporter,
        already: Callable[[], bool] | None = None,
    ):
        self.ctx = ctx
        self.tasks = tasks
        self.grace_s = grace_s
        self.reporter = reporter
        self.already = already  # a stop asked for before the loop took the signals (a worker)
        self.received = 0  # signals this run took, whether or not the loop got to act on them
        self.signals = 0  # those acted on
        self.ended = False
        self.timer: asyncio.TimerHandle | None = None
        self.abandoned = False
        self.saved: dict[int, Any] = {}
        self.on_stop: list[Any] = []  # called at the first signal (e.g. end the outbox's drain)
        self.threads: list[RunThreads] = []  # the loop's and the storage's (``RunThreads``)

    @contextlib.contextmanager
    def installed(self, loop: asyncio.AbstractEventLoop):
        """The run's own handlers for SIGINT, SIGTERM and SIGHUP while the block runs, then the
        previous ones again.

        A plain ``signal.signal`` handler, not ``loop.add_signal_handler``: asyncio's handler
        only writes to a wake-up pipe that the loop reads on its next turn, so a signal that
        came after the loop's last turn but before the handlers were removed was dropped
        unseen (an ``afc worker`` stopped just as its loop ended went on polling, deaf to the
        SIGTERM it had been sent; CI caught it). This handler counts the signal at once, in
        the main thread, and wakes the loop to act on it (``call_soon_threadsafe``: what
        asyncio's own Ctrl-C handling does); ``interrupted`` is true for a signal the loop
        never got to act on, so the caller still stops.

        The third exits here, in the handler, not through the loop: the loop acts on a
        signal once the ledger's commit sync in flight has ended (``signalled``), and a sync
        that never ends (the ledger's disk hung: an NFS server gone, a failing disk) left the
        run deaf to every Ctrl-C, the third included, until a SIGKILL
        (tests/test_audit54b_hung_sync.py)."""

        def taken(signum: int, frame: Any) -> None:
            self.received += 1
            if self.received >= 3:
                self.exit_now()
            loop.call_soon_threadsafe(self.signalled)

        for sig in STOP_SIGNALS:  # SIGHUP too: a terminal hanging up drains as SIGTERM does
            try:
                self.saved[sig] = signal.signal(sig, taken)
            except ValueError:  # not the main thread: the caller's handlers stay
                continue
            signal.siginterrupt(sig, False)  # a system call in a library resumes, as asyncio had it
        if (self.already is not None and self.already()) or streams.pipe_closed():
            # acted on now, before any job's first step: none has an attempt row yet
            self.received += 1
            self.act()
        try:
            with streams.watch(lambda: loop.call_soon_threadsafe(self.reader_gone)):
                yield self
        finally:
            self.ended = True
            if self.timer is not None:
                self.timer.cancel()
            for sig, handler in self.saved.items():
                signal.signal(sig, handler)  # the CLI's own handlers, for after the run

    def reader_gone(self) -> None:
        """The pipe afc's output goes to was closed (``afc submit ... | head -3``; see
        afc_cli/streams.py): what SIGPIPE means, acted on as a first signal is (a drain, exit
        130) rather than as death on the spot. Once: a stop already under way (a hangup, after
        which writes fail too; a ``StopsRun``) is not pushed on to abandoning its calls."""
        if self.received or self.signals or self.ended:
            return
        self.received += 1
        self.signalled()

    @property
    def interrupted(self) -> bool:
        return self.received > 0  # every signal acted on was received first

    def signalled(self) -> None:
        # after the ledger's commit sync in flight, if any (SqliteLedger.after_sync): the
        # jobs whose attempt rows were committed before the signal go on to their calls
        after_sync = getattr(self.ctx.ledger, "after_sync", None)
        if after_sync is None:
            self.act()
        else:
            after_sync(self.act)

    def act(self) -> None:
        if self.ended:  # the run is over: nothing left to drain (``interrupted`` says it)
            return
        self.signals += 1
        if self.signals == 1:
            self.drain()
        elif self.signals == 2:
            self.abandon("a second signal")
        else:
            self.exit_now()

    def exit_now(self) -> None:
        """The third signal: exit 130 at once (the ledger is consistent at every commit),
        the cursor the live panel hid given back first (``Reporter.exiting``): skipped with
        the panel's end, it left the terminal with no cursor until a 'reset'
        (tests/test_audit54e_third_signal_cursor.py)."""
        with contextlib.suppress(Exception):
            self.reporter.exiting()
        os._exit(EXIT_INTERRUPTED)

    def drain(self, why: str | None = None) -> None:
        ctx = self.ctx
        ctx.stopping.set()
        for job_id, task in self.tasks.items():
            if job_id not in ctx.protected and not task.done():
                task.cancel()  # not in a call: it waits for a slot, a backoff, a limit
        for job_id in list(ctx.polling):
            ctx.abandon_poll(job_id)  # its request id is committed: the next run polls it
        for callback in self.on_stop:
            callback()
        in_flight = len(ctx.protected - ctx.polling)
        self.reporter.stopping(self.grace_s, in_flight, why)
        loop = asyncio.get_running_loop()
        # a polled request whose result is ready (``RunContext.result_ready``) is fetched, if
        # it comes within a moment, rather than left to the next run (the provider may have
        # deleted it by then); one whose fetch lasts longer is left as a polled one is
        loop.call_later(min(self.grace_s, FETCH_WAIT_S), self._leave_fetching)
        self.timer = loop.call_later(self.grace_s, self.abandon, "the grace period ran out")

    def _leave_fetching(self) -> None:
        for job_id in list(self.ctx.fetching):
            self.ctx.abandon_poll(job_id)  # its request id is committed: the next run polls it

    def stop_for(self, error: Exception) -> None:
        """A job failed in a way that stops the run (``StopsRun``: its render's bytes could
        not be spooled, or its provider's answer could not be read): stop as at a first
        signal, so no new provider call starts (an attempt row committed but not sent ends
        unsent, at a known 0) and the calls already in flight finish within the grace and are
        recorded with their cost, instead of being cancelled into ``unknown`` (possibly paid
        twice over: once at the provider, once more by the next run). A signal after it
        abandons them, as a second signal does."""
        if self.ended or self.signals:
            return
        self.signals = 1
        self.drain(why=getattr(error, "reason", "afc met an error of its own"))

    def abandon(self, why: str) -> None:
        """Once: a second signal cancels the grace's timer, which abandoned (and said so,
        'abandoning 0 job(s)') a second time when the run outlived the grace (its renders
        being kept, stored)."""
        if self.timer is not None:
            self.timer.cancel()
        if self.abandoned:
            return
        self.abandoned = True
        for threads in self.threads:
            threads.abandoned = True  # the run's end waits for no call left in a thread
        left = [job_id for job_id, task in self.tasks.items() if not task.done()]
        storing = len(self.ctx.storing.intersection(left))
        self.reporter.abandoning(why, len(left), storing)
        for task in (self.tasks[job_id] for job_id in left):
            task.cancel()


def run_jobs(
    ledger: Ledger,
    job_ids: list[str],
    *,
    concurrency: int,
    reporter: Reporter | None = None,
    lease_s: float | None = None,
    budget: Budget | None = None,
    grace_s: float = DEFAULT_GRACE_S,
    checked: frozenset[str] = frozenset(),
    spool_checked: bool = False,
    run_id: str | None = None,
    more: Callable[[set[str]], list[str]] | None = None,
    more_every: float | None = None,
    stopped: Callable[[], bool] | None = None,
    dearest: dict[tuple, Fraction] | None = None,
    denied: dict[str, Any] | None = None,
) -> RunStats:
    """Run the given jobs to the end of what one run can do (and drain due webhooks).
    ``checked``: batches whose storage the caller has just checked (submit does, before
    admitting), not checked again: on S3 that is a round trip before the first call.
    ``spool_checked``: the caller has just checked the spool (``check_spool``; submit does,
    before admitting), so it is not written to again here.
    ``run_id``: the attempts' run, whose spend the budget caps (default: a new one); workers
    sharing one budget pass one id (afc_cli/worker.py).
    ``more``: asked for the ids of more jobs (claimed already, of batches this run opened)
    whenever no more than ``concurrency`` of the run's jobs are left unfinished, until it
    returns none; they run in this same loop (afc worker: no new loop per claim). It is
    given the ids of the jobs still running here, which it must not claim: see ``_fed``.
    ``more_every``: once ``more`` had none, it is asked again every so many seconds while
    the loop has room (a worker's ``--poll``); without it, not again in this run.
    ``stopped``: whether a stop was asked for before the loop took the signals over (a
    worker's SIGTERM while it opened the storages): the loop then starts by draining, as if
    the signal had come a moment later.
    ``dearest``: the dearest cost per image asked for that each model's answers have had
    (``RunContext.dearest``, which the budget reserves at least), kept and added to across
    the caller's runs: a worker's rounds share one budget, and a round that began knowing
    nothing reserved only the rate card's estimate again.
    ``denied``: the batches whose uploads a store refused (or failed, none of its writes
    answering), and until when
    (``RunContext.storage_denied``), kept across the caller's runs: a worker's round knew of
    no refusal its last round met, and paid for renders of the batch (below)."""
    if not job_ids and not ledger.has_webhooks():
        sweep_left(ledger)
        return RunStats()
    lease_s = lease_seconds() if lease_s is None else lease_s
    if concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    grace_seconds(grace_s)
    reporter = reporter or Reporter()
    say_network_ledger(ledger, reporter)
    storages = {row["name"]: storage_mod.open(row["storage"]) for row in ledger.batches()}
    for name in ledger.batches_of(job_ids):
        if name not in checked:
            open_batch(ledger, name, storages[name], check=stopped is None)
            if stopped is not None:
                check_storage_stoppable(storages[name], stopped)
            storages[name].check_keys(ledger.output_keys(name, job_ids))
        # (a submit's batch too, checked before its admission: its mark recorded now)
        hold_folder(ledger, name, storages[name], storages[name].folder_mark())
    limits = provider_limits(ledger)
    rates = batch_rates(ledger)
    if budget is not None and dearest is None:
        # a submit's or a resume's budget reserves, from its first call, what the ledger's
        # answers of a model already cost per image (a worker's rounds keep their own)
        dearest = dearest_known(ledger, ledger.batches_of(job_ids), rates)
    run_id = run_id or str(uuid.uuid4())
    from afc_cli.providers import PROVIDERS
    from afc_cli.providers.http import HttpProvider, size_pools

    size_pools(PROVIDERS, concurrency, limits)
    for provider in PROVIDERS.values():
        if isinstance(provider, HttpProvider):
            provider.watch_polls(reporter.notice)

    # A newer afc migrating the ledger as this command opened it (a long migration of a large
    # ledger; the open read the migrations committed before it): the run's claims would wait
    # for it and then run on its schema, paid for with this older code. Waited for and
    # refused here (exit 2), before a claim (tests/test_audit51c_claim_during_migration.py)
    ledger.check_schema(wait=True)
    # Every module of afc the run imports after a paid call, imported before the first: an
    # upgrade of afc (pip install -U) under a running resume or worker replaces its files, and
    # a module first imported after that is the new version's, beside the old ones in memory
    # (or, in pip's own window, missing). afc_cli.inputs was first imported as a paid render's
    # answer came back, before its spool write: the run stopped as "a bug in afc" and the next
    # one paid for the render again (tests/test_audit51c_upgraded_under_a_run.py)
    import afc_cli.inputs  # noqa: F401
    import afc_cli.progress  # noqa: F401

    spool = Spool(ledger.spool_root())
    running = bool(job_ids or more is not None)
    if running and not spool_checked:
        check_spool(spool, per_host=ledger.SPOOL_PER_HOST)
    if own_spool(ledger, spool, running=running):
        sweep_spool(ledger, spool)

    # asyncio's own default: min(32, CPUs + 4); as many again for storage calls
    threads = RunThreads(min(32, (os.cpu_count() or 1) + 4))
    storage_threads = RunThreads(threads.most)

    async def main() -> RunStats:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(threads)
        helper = None
        if any(storage.local for storage in storages.values()):
            from afc_cli.offload import FileWorker

            helper = FileWorker(notice=reporter.notice)
            await helper.start()
        ctx = RunContext(
            ledger=ledger,
            spool=spool,
            storages=storages,
            rates=rates,
            slots=Slots(concurrency),
            spool_slots=asyncio.Semaphore(max(SPOOL_SLOTS, concurrency)),
            store_slots=asyncio.Semaphore(STORE_SLOTS),
            lease_s=lease_s,
            report=reporter.event,
            notice=reporter.notice,
            run_id=run_id,
            cap_micros=budget.cap_micros if budget else None,
            min_free_bytes=min_free_bytes(),
            limits={name: ProviderLimit(**values) for name, values in limits.items()},
            max_interrupts=interrupts_cap,
            network=partial(loop.run_in_executor, storage_threads),
            **({"offload": helper.call, "quick": helper.quick} if helper else {}),
            **({"dearest": dearest} if dearest is not None else {}),
            # a refused upload holds its batch's renders in the caller's later runs too: a
            # worker's jobs that a refusal held come back in a round of their own (they rest
            # STORE_PAUSE_S, the refused upload's job twice as long after each refusal), and
            # that round, knowing of none, paid for --concurrency renders or more before the
            # first was refused again (tests/test_audit60a_worker_denied_rounds.py)
            **({"storage_denied": denied} if denied is not None else {}),
        )
        ctx.left_in_spool = spool.described() if running else set()
        ctx.checked = {*checked, *ledger.batches_of(job_ids)}
        if running and ctx.min_free_bytes:
            # the room each render in flight is counted at from the first wave: knowing no
            # size until its first render was spooled, a run's first --concurrency calls were
            # held to the margin alone, and a cron'd resume on a nearly full disk paid for
            # renders whose bytes then found no room (a synchronous provider's paid again)
            ctx.largest_output = ledger.largest_output(ctx.checked)

        def renewal_failed(error: LedgerWriteError) -> None:
            if ctx.ledger_error is None:  # raised once the calls in flight have ended
                ctx.ledger_error = error
            ctx.ledger_broke(error)

        heartbeat = asyncio.create_task(
            _renew(ledger, lease_s, renewal_failed, look=lambda: ctx.wake_lost())
        )
        stop = asyncio.Event()
        outbox = None
        ctx.blocked = set(ledger.blocked_job_ids(job_ids))
        _note_outputs(ctx, job_ids)
        # Blocked jobs that only a person's decision can settle (each need succeeded or
        # awaiting review, ``Ledger.parked_blocked``) start no task: theirs found them so and
        # ended, a transaction and a task each (a cron'd 'afc resume' of 100,000 shots behind
        # a style frame awaiting review took 20 s and 630 MB to run nothing). Counted as run
        # here as their tasks were, and looked at again with the others at the run's end
        # (``_settle_left``: a decision made meanwhile runs them in this run).
        parked = set(ledger.parked_blocked(job_ids)) if ctx.blocked else set()
        count_adoptions(ctx, [job_id for job_id in job_ids if job_id not in parked])
        ctx.ran += len(parked)
        # the uploads an earlier run's failing storage left go first (``note_stores_first``)
        first = note_stores_first(ctx, [job_id for job_id in job_ids if job_id not in parked])
        started = [_start(ctx, job_id) for job_id in first]
        interruption = Interruption(ctx, ctx.tasks, grace_s, reporter, already=stopped)
        interruption.threads = [threads, storage_threads]
        ctx.ledger_broke = interruption.stop_for

        def start_outbox(batch: str | None = None) -> None:
            """The outbox posted beside the batch, never inside a job's steps, once there is
            something to post: at the loop's start, or when a worker's refill brings a batch
            the loop had not met (``_open_batches``; one admitted since, with a webhook:
            ``batch``, whose jobs alone are looked at, with the pending deliveries)."""
            nonlocal outbox
            # a stop acted on as the handlers went in (a worker's SIGTERM while it opened
            # the storages, a closed pipe) was acted on before the outbox began: no drain
            # is started to post events after it, and its rows wait for the next run
            if outbox is None and not ctx.stopping.is_set() and ledger.has_webhooks(batch):
                from afc_cli.webhooks import run_beside

                outbox = asyncio.create_task(run_beside(ledger, stop))
                interruption.on_stop.append(outbox.cancel)  # its rows wait for the next run

        ctx.start_outbox = start_outbox

        async def keep_abandoned() -> None:
            """Paid renders back from their calls whose jobs an abandon (a second signal, the
            grace run out) cancelled on their way to the spool: kept there as a broken
            ledger's are, beside their attempts' rows (left 'unknown' at their known cost by
            ``release_all``), for the next run here to store. Dropped, each was paid for
            again by that run (a synchronous provider's; a job-style one's polled and fetched
            again while the provider kept it)."""
            if ctx.rendered and ctx.ledger_error is None:
                kept = await keep_rendered(ctx)
                reporter.notice(_abandoned_notice(kept, ctx.unkept, spool.root))

        try:
            with ledger.grouped(loop), interruption.installed(loop):
                start_outbox()
                try:
                    try:
                        if more is None:
                            await _all_done(started, interruption.stop_for)
                            await _settle_left(ctx, job_ids, interruption.stop_for)
                            await _take_released(ctx, interruption.stop_for)
                        else:
                            del started  # a fed loop holds only its unfinished jobs' tasks
                            await _fed(ctx, more, concurrency, interruption.stop_for, more_every)
                    except LedgerWriteError:
                        raise  # its renders are kept below, with the ledger's say
                    except Exception:
                        # a run draining for an error (``StopsRun``, afc's own) that then
                        # abandoned its calls: its renders in hand, dropped when only a run
                        # that ended without an error kept them, were paid for again by the
                        # next run (tests/test_audit54e_error_then_abandon.py)
                        await keep_abandoned()
                        raise
                    await keep_abandoned()
                    if ctx.ledger_error is not None:  # met where its job went on (a submit)
                        raise ctx.ledger_error
                except LedgerWriteError:
                    kept = await keep_rendered(ctx)
                    if kept:
                        stored = (
                            0  # a signal asked for the way out at once: they stay spooled
                            if interruption.signals > 1
                            else await store_kept(ctx, timeout=max(grace_s, KEPT_STORE_S))
                        )
                        reporter.notice(_kept_notice(kept, stored, spool.root))
                    if ctx.unkept:
                        reporter.notice(_unkept_notice(ctx.unkept, spool.root, kept))
                    for key, provider, request_id, noted in ctx.unrecorded.values():
                        then = (
                            f"its id is kept in the spool {spool.root}: the next run on this "
                            "host polls it instead of paying again"
                            if noted
                            else "afc cannot poll it again, and the next run renders the job "
                            f"anew; its output, if any, is at {provider} under that id"
                        )
                        reporter.notice(
                            f"job {key}: {provider} request {request_id} was submitted (and "
                            "may be billed) but the ledger could not record it, and it did not "
                            f"end within the grace period: {then}"
                        )
                    raise
                stop.set()
                if outbox is not None:
                    await asyncio.wait({outbox})  # cancelled by a stop: no error
                    if not outbox.cancelled() and outbox.exception() is not None:
                        raise outbox.exception()
        except AfcError as exc:
            # an expected error of a submit's or resume's run that a signal had stopped, or
            # that one stopped as it drained for the error (a paid render its spool could
            # not keep in the grace period): said, and exit 130, as README's exit codes have
            # it (130 wins over every other code: every job stays resumable); it exited 1, a
            # job failed to a script. So does a script's worker (``--until-idle``: its
            # ``more`` says so), which README has exit 130 once a signal stopped it before it
            # went idle; a service's worker keeps the error's own code (worker.WorkerResult).
            if interruption.interrupted and (more is None or getattr(more, "until_idle", False)):
                exc.exit_code = EXIT_INTERRUPTED
            raise
        finally:
            # on every way out: a run stopped by an error (a broken ledger, an answer it could
            # not read) left aiohttp's "Unclosed client session" lines on its stderr
            for provider in ctx.providers.values():
                with contextlib.suppress(Exception):
                    await provider.close()
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
            if outbox is not None and not outbox.done():
                outbox.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await outbox
            elif outbox is not None and not outbox.cancelled():
                # an outbox that failed beside the jobs (a locked or full ledger fails its next
                # write as it fails theirs) is the run's error too: retrieved, so asyncio prints
                # no "Task exception was never retrieved" and traceback of it
                outbox.exception()
            if helper is not None:
                await helper.close(timeout=HELPER_CLOSE_S)
        money = ledger.run_money(run_id)
        return RunStats(
            ctx.ran,
            ctx.budget_hit,
            money["priced"],
            money["unknown_cost"],
            money["reserved"],
            # looked up only for the summary of a run past its cap (one row an adopted
            # request: thousands after a crashed batch)
            adopted_micros=ledger.attempts_cost(ctx.adopted, run_id)
            if budget is not None and money["priced"] > budget.cap_micros
            else 0,
            **(
                past_cap(ledger, run_id, rates, ctx.adopted)
                if budget is not None and money["priced"] > budget.cap_micros
                else {}
            ),
            interrupted=interruption.interrupted,
            finished=ctx.finished,
            ended_badly=ctx.ended_badly,
            cancelled=ctx.cancelled,
        )

    interrupts_cap = max_interrupts()
    # progress written by a thread of its own while the loop runs, so that a reader who does
    # not read (a paused terminal, a full pipe) never stops the loop in a transaction with its
    # jobs' rows locked; written out, waiting for the reader, once they are all ended
    # (afc_cli/streams.py)
    try:
        with streams.detached():
            reporter.begin(len(job_ids), cap_micros=budget.cap_micros if budget else None)
            try:
                stats = asyncio.run(main())
                if stats.interrupted:
                    # what is still in flight was abandoned: unknown, possibly paid; leases freed
                    stats.abandoned = ledger.release_all()
                    if stats.abandoned:  # their cost is unknown too: shown apart from the priced
                        money = ledger.run_money(run_id)
                        stats.unknown_cost_attempts = money["unknown_cost"]
                        stats.reserved_micros = money["reserved"]
                return stats
            except BaseException:
                # Interrupted (Ctrl-C, SIGTERM) or broken: nothing is cancelled; the attempts we had
                # in flight are recorded as unknown and our leases are freed, so the next run
                # resumes.
                with contextlib.suppress(Exception):
                    ledger.release_all()
                raise
            finally:
                storage_threads.shutdown(wait=not storage_threads.abandoned)
    finally:
        # once the backlog is written out: the live panel's last state, and the cursor it
        # hid given back to the terminal, written whatever the backlog dropped (a terminal
        # paused for minutes: they were dropped with the redraws before them, and the
        # terminal was left with no cursor under a panel stale by minutes)
        reporter.end()


def past_cap(
    ledger: Ledger,
    run_id: str,
    rates: dict[str, RateCards],
    adopted: Collection[tuple[str, str, int]],
) -> dict[str, Any]:
    """What took a run's spend past its cap, of its own attempts (not the requests it
    ``adopted``), for its summary: ``unreserved_micros``, the known cost of the attempts of
    models whose batch's card has no per-image price (run with ``--allow-unpriced``, they
    reserved nothing and started while the spend was within the cap), and
    ``token_priced``, whether any attempt that reserved an estimate was priced by a card
    that charges tokens (else an answer cost more than its estimate by holding more images
    than asked for). A summary past its cap told a per-second Replicate card's user, and a
    per-image fal card's, to give a token card a bigger per_image."""
    adopted = set(adopted)
    unreserved, tokens = 0, False
    for job_id, batch, provider, model, number, cost in ledger.run_costs(run_id):
        if (job_id, provider, number) in adopted:
            continue
        cards = rates.get(batch) or RateCards()
        if cards.estimate(provider, model) is None:
            unreserved += int(cost)
        elif any(rate in cards.cards[(provider, model)] for rate in TOKEN_RATES):
            tokens = True
    return {"unreserved_micros": unreserved, "token_priced": tokens}


async def _all_done(
    tasks: list[asyncio.Task],
    drain: Callable[[Exception], None] | None = None,
) -> None:
    """Wait for every job's task. The first one that fails stops the run, and its error is
    raised once every task has ended. A cancelled task (a stopping run) is no failure.

    A failure that leaves the ledger sound (``StopsRun``: a spool that could not be written,
    a provider's answer afc could not read) stops the run through ``drain``
    (``Interruption.stop_for``): no new call starts and the calls in flight finish, so what
    they cost is known. So does a ledger that cannot be written (``LedgerWriteError``): the
    calls in flight were paid whatever happens here, and once they answer, their renders are
    kept in the spool (``pipeline.keep_rendered``) for the next run to store without paying
    again; cancelled, they would be paid twice. So does any other failure (an error afc did
    not expect, a bug of its own): it cancelled the other tasks at once, and a synchronous
    provider's call cancelled in flight was paid for again by the next run
    (tests/test_unexpected_error_drains.py). The error is raised all the same once the calls
    in flight have ended: a second signal, or the grace running out, abandons them as ever."""
    pending = set(tasks)
    first: BaseException | None = None
    # other paid renders whose bytes the same full disk refused, said beside the first
    alike: list[SpoolError] = []
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
        # in the jobs' order, not the set's: of two jobs that failed in the same turn of the
        # loop, the first job's error is raised, whatever the tasks' hashes
        for task in [task for task in tasks if task in done]:
            if task.cancelled() or task.exception() is None:
                continue
            error = task.exception()
            if isinstance(error, Exception) and drain is not None:
                # (a broken ledger fails every job's next write: the jobs still in their
                # calls finish, and their renders go to the spool, ``pipeline.keep_rendered``)
                if first is None:
                    first = error
                    drain(error)
                elif isinstance(first, SpoolError) and isinstance(error, SpoolError):
                    alike.append(error)
                continue
            for other in pending:
                other.cancel()
            if pending:
                await asyncio.wait(pending)
            # the jobs that failed beside this one (a locked or full ledger fails every job's
            # next write) are this error too: retrieved, so asyncio prints no traceback of them
            for other in tasks:
                if other.done() and not other.cancelled():
                    other.exception()
            raise error
    if first is not None:
        raise first.besides(alike) if alike and isinstance(first, SpoolError) else first


async def _settle_left(
    ctx: RunContext,
    job_ids: list[str],
    drain: Callable[[Exception], None],
) -> None:
    """A submit's or resume's jobs left blocked whose needs a person decided while the run
    went on (an ``afc review approve`` or ``reject`` of a need awaiting review, once its
    dependent had found it undecided) are settled and run now, once the run's other jobs have
    ended: the run ended with them 'blocked ... waits for the jobs it needs', exit 0, their
    needs succeeded, and they waited for the next ``afc resume``. One query a round; a job
    is run again at most once (a re-submit that gave it new needs meanwhile leaves it
    blocked). A worker settles them at each claim (``Ledger.settle_ready_blocked``)."""
    tried: set[str] = set()
    while not (ctx.stopping.is_set() or ctx.budget_hit or ctx.ledger_error is not None):
        ready = [job_id for job_id in ctx.ledger.ready_blocked(job_ids) if job_id not in tried]
        if not ready:
            return
        tried.update(ready)
        ctx.blocked.update(ready)
        again = [_start(ctx, job_id) for job_id in ready]
        ctx.ran -= len(again)  # counted as run here already, when they were found blocked
        await _all_done(again, drain)


async def _take_released(ctx: RunContext, drain: Callable[[Exception], None]) -> None:
    """A submit's or resume's jobs that another afc process held when this run came to them
    (left alone: ``ctx.left_elsewhere``), which that process let go of while this run went
    on, are run now, once the run's other jobs have ended: stopped by Ctrl-C or SIGTERM, it
    released them (its Replicate and fal requests left for the next run to poll); killed, its
    leases are a dead process's, taken over at once on this host (``owner.lease_held``). The
    run ended exit 1 without them ('waiting at render: provider still rendering', which no
    process polled), and they waited for the next cron run, long enough for a fal output to
    be deleted and paid for again. Those a live process still holds stay its own. A job is
    run again at most once; its left requests count in the budget before it takes them
    over (``count_adoptions``), as a job's at the run's start do."""
    from afc_cli.owner import lease_held

    tried: set[str] = set()
    while not (ctx.stopping.is_set() or ctx.budget_hit or ctx.ledger_error is not None):
        left = sorted(ctx.left_elsewhere - tried)
        if not left:
            return
        now = ctx.ledger.lease_clock()
        free = [
            row["id"]
            for row in ctx.ledger.status_rows_of(left)
            if row["status"] in ("queued", "running", "waiting")
            and not lease_held(row["lease_owner"], row["lease_expires"], now, row.get("lease_mono"))
        ]
        if not free:
            return
        tried.update(free)
        ctx.left_elsewhere.difference_update(free)
        count_adoptions(ctx, free)
        await _all_done([_start(ctx, job_id) for job_id in free], drain)


def open_batch(
    ledger: Ledger, name: str, storage: storage_mod.Storage, *, check: bool = True
) -> None:
    """What a run checks of a batch before it pays for a call of the batch's jobs: its bucket
    reached through the endpoint it was admitted through, not another store's; its storage
    folder not gone (``refuse_gone``); with ``check``, its storage writable
    (``check_storage``): no render is paid for that could not be stored."""
    ledger.hold_endpoint(name, storage_mod.endpoint_of(storage.url))
    refuse_gone(ledger, name, storage)
    if check:
        check_storage(storage)


class StoppedBeforeRun(Exception):
    """A stop (a worker's SIGTERM) came while ``run_jobs`` checked a batch's storage before its
    loop (``check_storage_stoppable``): nothing of the claim ran, and the caller gives its jobs
    back at once."""


# how often a storage check before the loop looks whether a stop was asked for meanwhile
STOP_LOOK_S = 0.05


def check_storage_stoppable(
    storage: storage_mod.Storage, stopped: Callable[[], bool], look_s: float = STOP_LOOK_S
) -> None:
    """``check_storage`` for a caller whose signal handler only asks for a stop (``afc
    worker``: ``worker.Stop``), in a thread of its own, given up (``StoppedBeforeRun``) as
    soon as ``stopped`` says so. Run in the caller's thread, a bucket's HEAD that hung kept
    the worker deaf to SIGTERM for as long as the S3 client's timeouts and the storage
    policy's tries allow (120 s a read, three tries): a ``docker stop`` or ``systemctl stop``
    in that moment ended in a SIGKILL, its claimed jobs left leased to a dead process (on
    another host, waited out for the whole lease). The thread left behind is a daemon's: it
    holds no lease and writes nothing to the ledger, and the process exits without it."""
    if stopped():
        raise StoppedBeforeRun()
    done = threading.Event()
    failed: list[BaseException] = []

    def check() -> None:
        try:
            check_storage(storage)
        except BaseException as exc:  # handed to the caller's thread
            failed.append(exc)
        finally:
            done.set()

    threading.Thread(target=check, name="afc-storage-check", daemon=True).start()
    while not done.wait(look_s):
        if stopped():
            raise StoppedBeforeRun()
    if failed:
        raise failed[0]


async def _open_batches(ctx: RunContext, job_ids: list[str]) -> None:
    """The batches of a claim that joined the loop (a worker's, ``_fed``) that it had not
    checked, checked as ``run_jobs`` checks those of its start (``open_batch``; the storage's
    round trips off the loop's thread): a batch admitted since the loop started (its storage
    opened and its rate cards read now; ``worker.Refill`` let it in), or one the loop had
    opened but none of whose jobs it ran at its start. A worker's round refused a batch
    admitted after it began, and its claims stopped until every job it held had ended: one
    long render (a video's ten minutes) held the new batch, and three of four slots, as
    long. And a batch met first by a refill ran without its storage checked."""
    for name in ctx.ledger.batches_of(job_ids):
        if name in ctx.checked:
            continue
        if name not in ctx.storages:
            # this batch's row alone: every batch's storage and cards, read for each batch the
            # loop met, made a busy worker's loop slower by the batch
            row = ctx.ledger.batch(name)
            ctx.storages[name] = storage_mod.open(row["storage"])
            ctx.rates[name] = batch_rates(ctx.ledger, [row])[name]
        open_batch(ctx.ledger, name, ctx.storages[name], check=False)
        await ctx.network(check_storage, ctx.storages[name])
        mark = await ctx.network(ctx.storages[name].folder_mark)
        hold_folder(ctx.ledger, name, ctx.storages[name], mark)
        ctx.checked.add(name)
        if ctx.min_free_bytes:
            # its renders counted at its stored outputs from its first wave, as a run's start
            # counts its batches' (``run_jobs``): met here knowing no size for it, a worker
            # started as many of its renders as it had slots, on a spool disk with room for
            # a third of them, and the bytes of those past the room were paid for and lost
            ctx.largest_output = max(ctx.largest_output, ctx.ledger.largest_output([name]))
        # its jobs' webhooks posted in this loop: one that began with none to post started
        # no outbox, and their events waited for the loop's end (as long as work came)
        if ctx.start_outbox is not None:
            ctx.start_outbox(name)


def _note_outputs(ctx: RunContext, job_ids: list[str]) -> None:
    """Where this run's jobs come from two or more batches of one storage, the unfinished
    jobs of those batches that share an output key (``Ledger.shared_outputs``) go into
    ``RunContext.output_of``: such jobs run one after the other (``pipeline.run_job``); on
    a folder that takes keys differing only by case for one file, so do those
    (``Storage.name_of``). Nothing is read for a run of one batch, or of batches in storages of their own; a
    worker's refill reads again only when it brings a batch the loop does not hold jobs of.

    ``noted_batches`` is the batches whose jobs the loop holds (its tasks), not every batch it
    ever met: a worker's loop, fed batch after batch for as long as work comes, read the
    unfinished jobs of every batch it had met on that storage at each new one, with a
    statement naming them all (twice), whose ever longer texts filled the ledger's statement
    cache: 2,000 batches of 5 instant jobs on one folder grew it from 62 to 126 MiB resident,
    about 32 KiB a batch, for as long as the loop ran
    (tests/test_audit64i_note_outputs_bounded.py). A batch the loop holds no job of cannot
    run beside the new one; a job of it claimed later brings it back, read then with the
    batches held at that time."""
    met = ctx.noted_batches
    # trimmed first: a claimed job of a batch met before, none of whose jobs the loop holds
    # now, brings it back as new (trimmed after, it was left out of the look beside the new
    # batch whose key its job shares)
    met.intersection_update(ctx.ledger.batches_of(list(ctx.tasks)) if ctx.tasks else ())
    new = [name for name in ctx.ledger.batches_of(job_ids) if name not in met]
    if not new:
        return
    met.update(new)
    groups: dict[str, list[str]] = {}
    for name in met:
        groups.setdefault(ctx.storages[name].url, []).append(name)
    for url, names in groups.items():
        if len(names) > 1 and any(name in new for name in names):
            storage = ctx.storages[names[0]]
            name_of = storage.name_of if storage.folds_names() else None
            for job_id, key in ctx.ledger.shared_outputs(sorted(names), name_of):
                ctx.output_of[job_id] = (url, key)


def _start(ctx: RunContext, job_id: str) -> asyncio.Future:
    """Start a job's task (``pipeline.run_job``), kept in ``ctx.tasks`` while it runs. Once it
    has ended the loop keeps nothing of the job but its counts (``RunContext.ran``,
    ``finished``, ``ended_badly``): an ``afc worker`` feeds one loop for as long as its
    claims find work (``_fed``), and that loop kept every task it ever ran, with its id, until it ended
    (about 0.8 KB a job: 40 MB over 50,000 jobs; tests/test_audit_endurance.py)."""
    task = asyncio.ensure_future(run_job(ctx, job_id))
    ctx.tasks[job_id] = task
    ctx.ran += 1

    def ended(done: asyncio.Future) -> None:
        if done.cancelled() and job_id not in ctx.claimed_here and job_id not in ctx.blocked:
            # a stop (Ctrl-C, SIGTERM) cancelled it as it waited for a slot, before it
            # claimed its job: not run here (a stopped 20-job run at --concurrency 4 said
            # '20 run here' of the 4 it ran, beside another submit counting that one's jobs)
            ctx.ran -= 1
        if ctx.tasks.get(job_id) is done:  # (not a later task of the same job)
            ctx.claimed_here.discard(job_id)
            del ctx.tasks[job_id]
            ctx.landing.discard(job_id)  # one that ended before its call (``_too_full``)
            ctx.to_adopt.pop(job_id, None)  # one that ended before it took its request over
            ctx.blocked.discard(job_id)
            ctx.output_of.pop(job_id, None)
            # one whose task ended in an error (``run_job`` takes it out only at its end):
            # a run that error stopped said it waited for it as for a call in flight
            ctx.protected.discard(job_id)
        if job_id in ctx.ended_elsewhere:  # ended by the process that took it over
            ctx.ended_elsewhere.discard(job_id)
        elif not done.cancelled() and done.exception() is None and done.result() in TERMINAL:
            ctx.finished += 1
            ctx.ended_badly += done.result() != "succeeded"
            ctx.cancelled += done.result() == "cancelled"

    task.add_done_callback(ended)
    return task


async def _drained(
    error: Exception, pending: dict[asyncio.Future, str], drain: Callable[[Exception], None]
) -> None:
    """A fed loop's own error: the run drains for it, and its jobs' calls in flight end (their
    own errors set aside: the loop's is the one raised)."""
    drain(error)
    with contextlib.suppress(Exception):
        await _all_done(list(pending), drain)


async def _fed(
    ctx: RunContext,
    more: Callable[[set[str]], list[str]],
    low: int,
    drain: Callable[[Exception], None] | None = None,
    every: float | None = None,
) -> None:
    """``run_jobs(more=...)``: like ``_all_done``, and whenever no more than ``low`` jobs are
    left unfinished (the run not stopping), ask ``more`` for others and run them beside; done
    when every job is, once ``more`` had none. Once it had none it is asked again every
    ``every`` seconds while those jobs run (none: not again in this run). Not asked again, a
    worker whose loop held one long render (a video's ten minutes) left its other slots idle
    for as long as it ran: jobs submitted meanwhile, and shots whose style frame a person
    approved meanwhile, waited for it to end.

    ``more`` is told which jobs still run here, and claims none of them. A job whose task
    here stalled past its lease may have been taken over by another process and released
    again (a drain); a claim of it by this process would make the stalled task its lease
    holder again, though its view of the job is stale: it went on to finish the job on a
    request the other process had taken over (the attempt left ``unknown`` on a succeeded
    job). Left unclaimed, the stalled task's next fenced write fails as any lost lease's
    does (``JobLost``; a paid result is kept, ``pipeline._keep_late_result``), and the job
    is claimed afresh once that task has ended."""
    asked_out = False
    ended = False  # the feeding ended for this run (a claim it gave back)
    loop = asyncio.get_running_loop()
    asked_at = loop.time()  # when ``more`` was last asked
    # the unfinished jobs' tasks, kept as jobs start and end: a worker's loop runs thousands
    # of jobs, and recounting every task it ever ran at each job's end grew with the square
    # of their number (and keeping them, with their number: ``_start``)
    pending = {task: job_id for job_id, task in ctx.tasks.items() if not task.done()}

    def busy() -> int:
        # A job waiting in this loop for its batch's storage (``RunContext.told_waiting``:
        # held at its probe, holding no slot) is no work in hand: counted, a claim's held
        # jobs kept the loop above ``low`` for their whole wait (a pause, or a held batch's
        # renders in flight), its slots idle and every other batch unclaimed
        return len(pending) - len(ctx.told_waiting)

    while True:
        again = every is not None and loop.time() - asked_at >= every
        if busy() <= low and not (
            ended or (asked_out and not again) or ctx.stopping.is_set() or ctx.budget_hit
        ):
            asked_at = loop.time()
            try:
                new = more(set(pending.values()))
            except Exception as error:
                if drain is None:
                    raise
                # The claim met the broken ledger first (a worker's PostgreSQL connection lost
                # between two of its jobs' writes), or an error of afc's own: the run stops as
                # when a job's write meets it (``_all_done``), the calls in flight finishing
                # and their renders kept. Raised at once, it cancelled them: paid, and paid
                # again by the next worker (tests/test_audit54e_fed_error.py)
                await _drained(error, pending, drain)
                raise error from None
            asked_out = not new
            if new:
                try:
                    fail_point("claimed")  # tests: an error of afc's own, a claim in hand
                    await _open_batches(ctx, new)
                    for name in ctx.ledger.batches_of(new):
                        ctx.storages[name].check_keys(ctx.ledger.output_keys(name, new))
                except (UsageError, StorageError):
                    # an output of this claim could not be stored (a file where its folder
                    # goes, a batch's storage failing its check): the claim is given back and
                    # the feeding ends, as a claim ``more`` refuses (worker.Refill); the jobs
                    # in their calls finish, and the worker's next round claims it afresh and
                    # says why (a storage error retried at each poll, as at any round's
                    # start). Raised here, it ended the loop at once, abandoning the paid
                    # calls in flight
                    for job_id in new:
                        job = ctx.ledger.job(job_id)
                        if job is not None:
                            ctx.ledger.release(job)
                    # nor counted as claimed (``worker.Refill.given_back``)
                    given_back = getattr(more, "given_back", None)
                    if given_back is not None:
                        given_back(new)
                    asked_out = ended = True
                    continue
                except Exception as error:
                    if drain is None:
                        raise
                    # an error of the loop's own with a claim in hand (a bug; a ledger read
                    # that fails): the run stops as when a job meets one (``_all_done``), the
                    # calls in flight finishing; raised at once, it cancelled them (a call
                    # cut off, paid, and paid again by the next run). The claim's jobs, never
                    # started, are freed with the run's leases (``Ledger.release_all``)
                    await _drained(error, pending, drain)
                    raise
                ctx.blocked |= set(ctx.ledger.blocked_job_ids(new))
                _note_outputs(ctx, new)
                count_adoptions(ctx, new)
                for job_id in note_stores_first(ctx, new):
                    pending[_start(ctx, job_id)] = job_id
                continue
        if not pending:
            return
        # with room in the loop, woken to ask ``more`` again when that is due
        waited = (
            max(0.0, asked_at + every - loop.time())
            if asked_out and not ended and every is not None and busy() <= low
            else None
        )
        done, _ = await asyncio.wait(pending, timeout=waited, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            del pending[task]
        failed = [t for t in done if not t.cancelled() and t.exception() is not None]
        if failed:
            await _all_done([*failed, *pending], drain)
            pending = {task: job_id for task, job_id in pending.items() if not task.done()}


def note_held_elsewhere(ledger: Ledger, rows: list[dict[str, Any]]) -> None:
    """A job this run left alone because another live afc process holds it (a submit and a
    resume of one batch at once) says so, instead of a bare "running at render". Held as a
    claim finds it held (``owner.lease_held``): its lease measured on the ledger's clock, the
    database server's on PostgreSQL, where this host's clock said nothing of another host's
    live lease once it ran ahead of the server's."""
    from afc_cli.listing import waiting_now
    from afc_cli.owner import (
        host_id,
        host_of,
        is_host_lease,
        lease_held,
        parse_owner,
        sees_process,
    )

    now = ledger.lease_clock()
    for row in rows:  # status rows carry the lease: no query per job (100,000 took seconds)
        if row["status"] not in ("queued", "running", "waiting"):
            continue
        # One whose holder is gone since this run left it alone (the other submit killed
        # while this one went on) is said so, as 'afc status' says it: the run's summary
        # said only 'running at render', as if that process still rendered it, while nothing
        # runs it until the next run takes it over.
        row["waiting_reason"] = waiting_now(row, row.get("waiting_reason"), now)
        # A waiting job's own reason (a Replicate or fal request polled: 'provider still
        # rendering: replicate request ...') is the holder's word, not this run's: a cron'd
        # resume beside a run that polls it said only that, '0 run here' and exit 1, nothing
        # of the other process (nor, under a budget, that the budget does not cap it). Kept
        # after the holder; a host's lease keeps it alone (its spool's story is that reason's).
        last = row.get("waiting_reason")
        holder = row.get("lease_owner")
        if (
            holder
            and holder != ledger.owner
            and lease_held(holder, row.get("lease_expires"), now, row.get("lease_mono"))
        ):
            if is_host_lease(holder):
                if last:
                    continue
                row["waiting_reason"] = (
                    f"its rendered output is in the spool of host {host_of(holder)}, where a run "
                    "stores it; this run left it alone (a run on another host takes it once "
                    "that lease has run out)"
                )
                continue
            host, rest = (parse_owner(holder) or (holder, "?"))[:2]
            # its calls are that process's, under its budget, not this run's (cli._print_run)
            row["held_elsewhere"] = True
            row["waiting_reason"] = (
                f"being run by another afc process (pid {rest} on {host}); this run left it alone"
            )
            if host == host_id() and not sees_process(holder):
                # this host's id, another process table: another machine or container under
                # this id, or a process of this host before it restarted (owner.sees_process)
                row["waiting_reason"] = (
                    f"held by pid {rest} of host id {host} on another machine, boot or pid "
                    "namespace, which this host cannot look at: left alone until its lease "
                    "runs out (AFC_LEASE_S after its last renewal)"
                )
            if last:
                row["waiting_reason"] += f" (last recorded: {last})"


def lease_seconds() -> float:
    """``AFC_LEASE_S``: how long a claim holds a job without being renewed (default 300; a run
    renews its leases every third of it). Another host's job is taken over only once its
    lease expired by the ledger's clock, so a shorter lease recovers a dead host's jobs
    sooner, and a longer one tolerates longer stalls (a paused VM, a slow network). At most a
    day (``MAX_LEASE_S``): ``inf`` or ``1e400`` was taken, and a dead host's jobs were then
    never taken over by anyone."""
    return _env_number(
        "AFC_LEASE_S",
        LEASE_S,
        float,
        lambda s: 3 <= s <= MAX_LEASE_S,
        f"a number of seconds from 3 to {MAX_LEASE_S}",
    )


MAX_LEASE_S = 86_400


def grace_seconds(grace_s: float | None = None) -> float:
    """``--grace`` (or ``AFC_GRACE_S`` when ``grace_s`` is None, as ``afc plan``, which takes
    no ``--grace``, checks it): seconds the calls in flight may finish after Ctrl-C or
    SIGTERM, >= 0 (``inf``: they are never abandoned). ``nan`` is refused: the option's own
    check (``min=0``) let it through, and a timer of ``nan`` seconds fires at once, so the
    first Ctrl-C abandoned every paid call in flight."""
    if grace_s is None:
        return _env_number(
            "AFC_GRACE_S", DEFAULT_GRACE_S, float, lambda s: s >= 0, "a number of seconds >= 0"
        )
    if not grace_s >= 0:
        raise UsageError(f"--grace must be a number of seconds >= 0, got {grace_s}")
    return grace_s


def poll_seconds() -> float:
    """``AFC_POLL_S`` (default 2): seconds between polls of a job-style provider. Checked
    before a run, since the adapters read it only at their first poll, after the paid submit
    (``providers/http.py``: ``poll_interval``)."""
    return _env_number(
        "AFC_POLL_S", 2.0, float, lambda s: 0 < s <= 3600, "a number of seconds > 0, at most 3600"
    )


def min_free_bytes() -> int:
    """``AFC_MIN_FREE_MB`` (default 64, also when set blank, as the other run settings): the
    free space below which no render starts."""
    value = os.environ.get("AFC_MIN_FREE_MB", "")
    if not value.strip():
        value = str(DEFAULT_MIN_FREE_MB)
    try:
        mib = float(value)
    except ValueError:
        raise UsageError(f"AFC_MIN_FREE_MB must be a number of MiB, got {value!r}") from None
    if not 0 <= mib < 2**40:
        raise UsageError(f"AFC_MIN_FREE_MB must be a number of MiB >= 0, got {value!r}")
    return int(mib * 1024 * 1024)


# Open files a run holds beside one socket per call in flight: the ledger (database, WAL,
# shared memory), the file helper's pipes, the event loop's own (measured: 117 at
# --concurrency 100, 17 of them beside the sockets), with room for the spool and storage slots'
# files (a big output spooled from a thread, an S3 upload's file and socket).
FILES_BESIDE_CALLS = 48
FILES_WANTED_BESIDE_CALLS = 256


def connection_pools(providers: Collection[str]) -> list[str]:
    """The connection pools a run calling ``providers`` fills, each holding up to
    ``--concurrency`` sockets, kept alive 30 s after their calls (afc_cli/providers/http.py
    ``size_pools``): each HTTP provider's own, and a second one for its output downloads
    where it answers outputs as URLs (``HttpProvider.download_pool``). Named for a message."""
    from afc_cli.providers import PROVIDERS
    from afc_cli.providers.http import HttpProvider

    pools = []
    for name in sorted(providers):
        provider = PROVIDERS.get(name)
        if isinstance(provider, HttpProvider):
            pools.append(f"{name}'s")
            if provider.download_pool:
                pools.append(f"{name}'s downloads'")
    return pools


def open_files(concurrency: int, providers: Collection[str] = ()) -> None:
    """Room for the files a run of ``concurrency`` calls to ``providers`` holds open, made
    before anything is written. A process that ran out mid-run (EMFILE: ``ulimit -n``, 1024 in
    many shells, 256 on macOS, below a ``--concurrency`` of hundreds) failed its calls'
    sockets as transient errors and then the ledger's next write, which stopped the run with
    every call in flight left possibly paid (paid again by the next run), or a big output's
    spool file, losing a paid render. So the soft limit is raised as far as the hard limit
    lets it (as Go does for every program), and a run that would still lack room for a socket
    per call in each of its connection pools (``connection_pools``: a chain that falls back
    from OpenAI to Replicate fills both providers' pools, and Replicate's downloads a third)
    is refused (UsageError, exit 2) with the concurrency that fits. Counted with one pool, a
    run of 200 wide over two providers was let start under a limit of 248 files and met
    EMFILE: its fallback calls failed as never sent, using up their jobs' attempts, until
    the ledger's WAL could not be opened and the run stopped."""
    try:
        import resource
    except ImportError:  # not a POSIX system: nothing to raise
        return
    named = connection_pools(providers)
    pools = max(1, len(named))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    infinite = resource.RLIM_INFINITY
    wanted = 2 * concurrency * pools + FILES_WANTED_BESIDE_CALLS
    if soft != infinite and soft < wanted:
        # the hard limit itself where it is finite (more room costs nothing); else what the
        # run wants (macOS refuses a soft limit past OPEN_MAX under an infinite hard one)
        for target in (hard, wanted) if hard != infinite else (wanted,):
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, target), hard))
                break
            except (ValueError, OSError):
                continue
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    need = concurrency * pools + FILES_BESIDE_CALLS
    if soft != infinite and soft < need:
        fits = (soft - FILES_BESIDE_CALLS) // pools
        where = (
            f" in each of its {pools} connection pools ({', '.join(named)})" if pools > 1 else ""
        )
        raise UsageError(
            f"--concurrency {concurrency} needs at least {need} open files (a socket per call "
            f"in flight{where}, and {FILES_BESIDE_CALLS} beside), but this process may open only "
            f"{soft} (ulimit -n, hard limit {'unlimited' if hard == infinite else hard}): "
            + (f"give --concurrency {fits} or less, or " if fits >= 1 else "")
            + "raise the limit ('ulimit -n', or LimitNOFILE= for a systemd service); "
            "nothing was run"
        )


# the SQLite ledgers on a network file system this process has said so of (once a process:
# a worker's rounds each start a run)
_NETWORK_SAID: set[str] = set()


def say_network_ledger(ledger: Ledger, reporter: Reporter) -> None:
    """Warn, once, of a SQLite ledger on a network file system (an NFS or SMB share): SQLite's
    locks there cannot be relied on, and runs on two machines sharing the file could both
    claim a job and both pay for it. A warning, not a refusal: one machine alone on such a
    share is the common case, and nothing tells afc whether another uses it too."""
    if ledger_file.is_postgres(ledger.path) or str(ledger.path) in _NETWORK_SAID:
        return
    _NETWORK_SAID.add(str(ledger.path))
    kind = ledger_file.network_file_system(Path(str(ledger.path)))
    if kind is not None:
        reporter.notice(
            f"the ledger {ledger.path} is on a network file system ({kind}): SQLite's locks "
            "there cannot be relied on, and runs on two machines sharing it could both pay for "
            "one job. Keep a SQLite ledger on a local disk of the one machine that runs afc; "
            "for several machines use a PostgreSQL ledger (README, 'Running on several "
            "machines')"
        )


def check_spool(spool: Spool, *, per_host: bool = False) -> None:
    """Refuse a run whose spool cannot be written (``Spool.check``), before any render is paid
    for: its bytes must have somewhere to go. ``per_host``: a PostgreSQL ledger's, which is
    ``AFC_SPOOL_DIR`` or ``afc-spool`` in the working folder, not a folder beside the ledger:
    run from a read-only working folder (a container's root, a cron line's home of another
    user) it was said as a disk to fix, the variable that moves it unnamed."""
    try:
        spool.check()
    except OSError as exc:
        where = ""
        if per_host:
            where = (
                " (a PostgreSQL ledger's runs on this host spool to AFC_SPOOL_DIR, else to "
                "afc-spool in the working folder: set AFC_SPOOL_DIR to a folder this user can "
                "write, on this machine's disk)"
            )
        raise SpoolError(
            f"the spool {spool.root} cannot be written: {exc}{where}. No render was started; "
            "fix the disk or move what is in the way, then run again."
        ) from None


def own_spool(ledger: Ledger, spool: Spool, *, running: bool) -> bool:
    """Whether ``spool`` is this ledger's (``Spool.mark``): a run marks an unmarked one as
    its ledger's. Two ledgers' runs in one spool (two PostgreSQL ledgers run from one working
    folder both spool to ./afc-spool) take each other's paid renders: a job's spool file is
    named after its batch and key, alike in both, so one's render overwrote the other's
    spooled one and its success removed it (paid again), and one adopted the other's file as
    its own output. A run of another ledger's spool is refused (exit 2, before it admits or
    renders anything); one with nothing to run leaves the spool alone (False: no sweep).
    The rule is ``_spool_verdict``'s, which ``spool_problem`` reads for ``afc plan``."""
    identity = ledger.spool_identity()
    if identity is None:  # its own by its name (a SQLite ledger's)
        return True
    if not running and spool.owner() is None:  # nothing to mark, nothing refused
        return True
    named = str(ledger.path)
    verdict, detail = _spool_verdict(spool, identity, named, lambda job_id: ledger.job(job_id))
    if verdict in ("mark", "restored") and running:
        try:  # a spool marked anew: a restored ledger's new database is the spool's
            found = spool.mark(identity, named, replace=verdict == "restored")
        except OSError as exc:
            raise SpoolError(
                f"the spool {spool.root} cannot be written: {exc}. No render was started; "
                "fix the disk or move what is in the way, then run again."
            ) from None
        if found.get("ledger") != identity and not _restored(found, identity, named):
            # another ledger's run marked it first (``Spool.mark`` keeps the first mark):
            # of two starting together one holds the spool, the other is refused
            raise UsageError(_another_ledgers(spool, found))
    if verdict not in ("foreign", "other"):
        return True
    if not running:
        return False
    raise UsageError(detail)


def spool_problem(
    spool: Spool, identity: str | None, named: str, known: Collection[str]
) -> str | None:
    """What refuses a run that renders of the ledger ``identity`` names (``named``) in
    ``spool``, as ``own_spool`` decides it, read without writing anything (``afc plan``):
    ``known`` holds the ledger's jobs among the spool's files. None: the run is not refused
    for it."""
    if identity is None:
        return None
    verdict, detail = _spool_verdict(spool, identity, named, known.__contains__)
    return detail if verdict in ("foreign", "other") else None


def _spool_verdict(
    spool: Spool, identity: str, named: str, known: Callable[[str], Any]
) -> tuple[str, str | None]:
    """A spool's standing for a run of the ledger ``identity`` (named ``named``; ``known``:
    whether a job id is that ledger's), with why a run is refused there:

    - ``own``: marked as this ledger's;
    - ``restored``: marked as this ledger's before it moved to a new database (``_restored``):
      its own, to be marked anew;
    - ``other``: marked as another ledger's: refused;
    - ``mark``: unmarked, and every file in it (if any) this ledger's: to be marked;
    - ``foreign``: unmarked, and every file in it another ledger's (a folder run from before
      spools were marked, or whose mark was removed): refused, as marked as this one's, that
      ledger's runs would be refused here and its paid renders left behind (paid again);
    - ``shared``: unmarked, with files of both: run unmarked (as both did before marks), or
      each ledger would be refused for the other's files for ever; the one whose files are
      all stored first is refused next, and the other marks the spool."""
    found = spool.owner()
    if found is None:
        held = spool.job_ids()
        foreign = sorted(job_id for job_id in held if not known(job_id))
        if not foreign:
            return "mark", None
        if len(foreign) < len(held):
            return "shared", None
        return "foreign", _foreign_files(spool, foreign)
    if found.get("ledger") == identity:
        return "own", None
    if _restored(found, identity, named):
        return "restored", None
    return "other", _another_ledgers(spool, found)


def _another_ledgers(spool: Spool, found: dict[str, Any]) -> str:
    if found.get("denied"):
        # this user may not read the mark: another user's run made it (a cron line of one
        # user, a worker of another, one of them with umask 077), of this ledger as likely
        # as of another; said as another ledger's spool, its advice was to move it away
        return (
            f"the spool {spool.root}: its mark {spool.root / OWNER_FILE} cannot be read by "
            f"this user ({found['denied']}), so afc cannot tell which ledger's spool it is; "
            "another user's run made it (with umask 077?). Make the spool and the files in "
            "it readable and writable by every user that runs afc with it, or give this "
            "user's runs a spool of their own (AFC_SPOOL_DIR); nothing was run."
        )
    return (
        f"the spool {spool.root} is the spool of another ledger, {found.get('named')} "
        f"(marked in {spool.root / OWNER_FILE}): runs of two ledgers in one spool take each "
        "other's paid renders, their job files being named alike. Set AFC_SPOOL_DIR to a "
        f"folder of this ledger's own, or run it from another folder; nothing was run. If "
        f"that ledger is gone for good, its .spool files are paid renders no run will store: "
        f"move them and {OWNER_FILE} away first."
    )


def _foreign_files(spool: Spool, foreign: list[str]) -> str:
    return (
        f"the spool {spool.root} holds files of {plural(len(foreign), 'job')} that "
        f"{'is' if len(foreign) == 1 else 'are'} not this ledger's (e.g. "
        f"{foreign[0]}): another ledger's runs spool there, and its paid renders wait "
        "in it. Set AFC_SPOOL_DIR to a folder of this ledger's own, or run it from "
        "another folder; run that ledger here to store them (its run marks the spool "
        "as its own); nothing was run. If that ledger is gone for good, its files are "
        "paid renders no run will store: move them away first."
    )


def _restored(found: dict[str, Any], identity: str, named: str) -> bool:
    """Whether a spool's mark of another identity is this ledger's own, made before it moved
    to a new database of the same name (pg_dump and a restore, a server upgraded by dump, a
    managed database restored): another oid, but the same URL and the same moment afc's
    schema was first applied (``PostgresLedger.spool_identity``, ``postgresql:OID:APPLIED``;
    the moment is in the dump). Every run of such a ledger was refused as another ledger's,
    its own URL named, and told to move its spooled renders away (paid again). A copy of the
    database beside it (``CREATE DATABASE ... TEMPLATE``) has another URL, and a database made
    anew has another moment: those are still another ledger's."""
    old = found.get("ledger")
    if not isinstance(old, str) or found.get("named") != named:
        return False
    was, now = old.split(":", 2), identity.split(":", 2)
    return len(was) == len(now) == 3 and was[0] == now[0] and was[2] == now[2] != "None"


def _kept_notice(kept: int, stored: int, root: Path) -> str:
    """What a run stopped by a broken ledger says of the paid renders it kept. Each one's
    cost, where its answer made it known, goes with it: in its ``.about`` record beside the
    spool file (``pipeline.keep_rendered``), which the next run's adoption records, and in a
    stored one's metadata. 'Their cost is unknown' sent a user to the provider's bill for
    renders the next run then recorded at their price."""
    head = f"{kept} paid render{'s' if kept != 1 else ''} the ledger could not record kept in "
    if not stored:
        return (
            f"{head}the spool {root}: the next run on this host stores them without paying "
            "again, each at the cost its answer made known (kept beside it in the spool)"
        )
    return (
        f"{head}the spool {root}, {stored} of them stored under their output keys too: the "
        "next run stores them without paying again (the stored ones on any host, the rest on "
        "this host), each at the cost its answer made known"
    )


def _abandoned_notice(kept: int, unkept: list[str], root: Path) -> str:
    """What a run that abandoned its calls says of the paid renders it held, back from their
    calls and not yet spooled (``keep_rendered``): kept in the spool, or, where the spool
    refused them, rendered (paid) again by the next run."""
    said = []
    if kept:
        said.append(
            f"{plural(kept, 'paid render')} not yet spooled when the calls were abandoned kept "
            f"in the spool {root}: the next run on this host stores them without paying again"
        )
    if unkept:
        said.append(
            f"{plural(len(unkept), 'paid render')} ({first_named(unkept, 4)}) could not be kept "
            f"in the spool {root}: the next run renders them again (paid again)"
        )
    return "; ".join(said)


def _unkept_notice(unkept: list[str], root: Path, kept: int = 0) -> str:
    """What a run stopped by a broken ledger says of the paid renders it could neither keep
    (the spool's disk refused their bytes: the ledger's own disk, full) nor record; 'more'
    only beside the ``kept`` ones said before it."""
    more = " more" if kept else ""
    return (
        f"{len(unkept)}{more} paid render{'s' if len(unkept) != 1 else ''} "
        f"({first_named(unkept, 4)}) could not "
        f"be kept in the spool {root} nor recorded: the next run renders "
        f"{'them' if len(unkept) != 1 else 'it'} again (paid again), unless the provider "
        "still holds the output of a request whose id was recorded"
    )


def refuse_gone(ledger: Ledger, batch: str, storage: storage_mod.Storage) -> None:
    """Refuse a ``file://`` storage folder that does not exist while the ledger records
    outputs of ``batch`` stored in it (``gone_refusal``)."""
    root = getattr(storage, "root", None)
    if not storage.local or root is None or os.path.lexists(root):
        return
    stored = _outputs_stored(ledger, batch)
    if stored:
        held = (ledger.batch(batch) or {}).get("storage_mark")
        raise UsageError(gone_refusal(batch, storage, held, stored))


def gone_refusal(batch: str, storage: storage_mod.Storage, held: str | None, stored: int) -> str:
    """Why a run is refused a ``file://`` folder that does not exist though ``stored`` outputs
    of ``batch`` were stored in it: a drive or share not mounted (its mount point an empty
    folder), a container started without its volume. ``check`` makes a missing folder, as a
    new batch's is; made here, on this machine's disk, the batch's next paid outputs were
    stored in it, hidden once the share was mounted over it again (or gone with the
    container), their jobs succeeded. Also what ``afc plan`` says of it."""
    root = getattr(storage, "root", None)
    # the folder made anew is held to the batch's mark (``hold_folder``): made alone, it
    # was refused next as another folder
    marked = f" and write the batch's mark into it: {_mark_written(held, root)}" if held else ""
    return (
        f"cannot use storage {storage_mod.shown_url(storage.url)}: {root} does not exist, "
        f"though {plural(stored, 'output')} of batch {batch} "
        f"{'was' if stored == 1 else 'were'} stored there (a "
        "drive or share not mounted? a container without its volume?). afc does not make "
        "it anew: the next outputs would be stored on this machine's disk, hidden once the "
        "folder is back. Mount it; or, if those outputs were moved away on purpose, create "
        f"the folder{marked}"
    )


def _outputs_stored(ledger: Ledger, batch: str) -> int:
    """How many outputs of ``batch`` are stored (its jobs succeeded, awaiting review or
    rejected): a folder without them is refused (``refuse_gone``, ``hold_folder``)."""
    from afc_cli.ledger.core import RENDERED

    return sum(n for _, status, n in ledger.status_counts(batch) if status in RENDERED)


def _mark_written(mark: str, root: Path | str | None) -> str:
    """The command that writes ``mark`` into the folder ``root`` as its mark, as a refusal
    says it for a folder that does hold the batch's outputs."""
    from afc_cli.storage.file import MARK_NAME

    return f"printf {mark} > {shlex.quote(str(Path(root or '.') / MARK_NAME))}"


# the first stored outputs of a batch with no mark recorded yet that ``hold_folder`` looks for
STORED_LOOKED_FOR = 3


def hold_folder(ledger: Ledger, batch: str, storage: storage_mod.Storage, mark: str | None) -> None:
    """Hold ``batch`` to the ``file://`` folder its runs store in: its mark (``mark``, the
    folder's ``Storage.folder_mark``) recorded on the batch by the first run that stores for
    it (``Ledger.mark_folder``), with the host it ran on. A folder of that path with another
    mark is not the batch's:

    - on another host, a run is refused (exit 2): the folder is that host's own, not the
      shared mount the batch's other hosts store in (a share not mounted there, made anew by
      afc on its disk, or a local folder of that path). Let through, each host stored its part
      of the batch on its own disk, every job said to have succeeded;
    - on the same host, where outputs of the batch were stored, it is refused as a folder that
      is gone is (``refuse_gone``): a share not mounted, its mount point an empty folder; or a
      folder put in the old one's place. With none stored yet, its mark is recorded instead.

    Either way a folder that does hold the batch's outputs (copied there on purpose) is let
    through once the batch's mark is written into it, as the message says."""
    if mark is None:
        return
    from afc_cli.owner import host_id
    from afc_cli.storage.file import BAD_MARK

    here = host_id()
    root = getattr(storage, "root", None)
    for _ in range(3):  # (a run recording another mark at once: read again, and judged)
        row = ledger.batch(batch)
        if row is None:
            return
        held, by = row.get("storage_mark"), row.get("storage_mark_host")
        if held == mark:
            return
        if held is None and root is not None:
            # A batch with outputs stored before afc recorded marks (a ledger upgraded past
            # m028) is marked by a folder that holds its first ones, not by whichever host's
            # folder ran first: recorded on a host without the share, each host holding the
            # outputs was refused next as another folder. A folder missing any of them (that
            # host's, or one whose outputs were moved away on purpose) records nothing: the
            # batch is held to no folder yet, as before marks
            keys = ledger.stored_output_keys(batch, STORED_LOOKED_FOR)
            if not all(os.path.lexists(Path(root) / key) for key in keys):
                return
        if held is not None:
            stored = _outputs_stored(ledger, batch) if by == here else 0
            refused = folder_refusal(batch, storage, mark, (held, by), here, stored)
            if refused is not None:
                raise UsageError(refused)
        if mark == BAD_MARK:
            return  # (a damaged mark file is never recorded as a folder's mark)
        ledger.mark_folder(batch, held, mark, here)


def folder_refusal(
    batch: str,
    storage: storage_mod.Storage,
    mark: str,
    marked: tuple[str, str | None],
    here: str,
    stored: int,
) -> str | None:
    """Why a run on host ``here`` is refused the ``file://`` folder whose mark is ``mark``
    (``Storage.folder_mark``), ``batch`` being held to the mark and host ``marked``
    (``hold_folder``) with ``stored`` outputs stored; None where it is not. Also what ``afc
    plan`` says of it."""
    from afc_cli.storage.file import BAD_MARK, MARK_NAME

    held, by = marked
    if mark == held:
        return None
    shown = storage_mod.shown_url(storage.url)
    root = getattr(storage, "root", None)
    written = _mark_written(held, root)
    other = (
        f"its {MARK_NAME} file holds no mark afc wrote"
        if mark == BAD_MARK
        else f"its {MARK_NAME} file holds another mark, or had none"
    )
    if by != here:
        return (
            f"cannot use storage {shown} for batch {batch}: the folder {root} on this "
            f"host ({here}) is not the one its runs on {by} store in ({other}). A file:// "
            "folder of a batch run on several machines must be one shared mount at the same "
            "path on each (is the share mounted here?); see README 'Running on several "
            "machines'. If this folder now holds the batch's outputs (copied here on purpose), "
            f"write the batch's mark into it: {written}"
        )
    if stored:
        return (
            f"cannot use storage {shown}: {root} is not the folder where "
            f"{plural(stored, 'output')} of "
            f"batch {batch} {'was' if stored == 1 else 'were'} stored ({other}: a drive "
            "or share not mounted, its mount point an empty folder? another folder put "
            "in its place?). afc does not store there: "
            "the next outputs would be hidden once the folder is back. Mount it; or, "
            "if this folder now holds the batch's outputs (moved here on purpose), "
            f"write the batch's mark into it: {written}"
        )
    return None


def sweep_left(ledger: Ledger) -> None:
    """With nothing to run, the spool files of successes a crash left (after the job's final
    commit, before the file's removal) go, as at any run's start: the last job of a batch
    left its file (a whole copy of its output) for good, every later 'afc resume' having
    nothing to run, and so did a worker restarted after a crash until its next claim. A
    PostgreSQL ledger's spool only once a run marked it as this ledger's (an unmarked
    ./afc-spool may hold another ledger's jobs of that id)."""
    spool = Spool(ledger.spool_root())
    mine = ledger.spool_identity() is None or spool.owner() is not None
    if mine and spool.job_ids() and own_spool(ledger, spool, running=False):
        sweep_spool(ledger, spool)


def sweep_spool(ledger: Ledger, spool: Spool) -> None:
    """Remove spool files of jobs whose output is stored and verified: succeeded, awaiting
    review or rejected (a crash between the job's final commit, or its review pause's, and the
    file's removal leaves one; a rejected job is final, so its file stayed for good). Files of
    every other job are kept: they are paid output."""
    from afc_cli.ledger.core import RENDERED

    for job_id in spool.job_ids():
        job = ledger.job(job_id)
        if job is not None and job["status"] in RENDERED:
            spool.remove(job_id)


# the longest a run's lease renewal task sleeps at a time (``_renew``)
RENEW_TICK_S = 5.0
# how soon a renewal that found some of the run's rows held by another transaction (a
# re-submit writing them) tries them again (``_renew``), until it has renewed them all
RENEW_RETRY_S = 0.02


async def _renew(
    ledger: Ledger,
    lease_s: float,
    failed: Callable[[LedgerWriteError], None] | None = None,
    look: Callable[[], None] | None = None,
) -> None:
    """Renew this run's leases every third of ``lease_s``, timed by ``awake_clock``, looked at
    every ``RENEW_TICK_S``; at each look, ``look`` too (``RunContext.wake_lost``: the jobs
    resting in a backoff or a limit's minute that a person cancelled meanwhile end their
    rest, one read for them all, only while some rest). A sleep of a third of the lease on
    the event loop's (monotonic) clock stood still while the host was suspended: woken, the
    run renewed up to that long
    later, and other hosts took over (and paid again for) jobs whose leases had outlived the
    suspend and then ran out while the run worked on them.

    A renewal that fails (a full disk, a lock held past its wait, a lost connection) is
    ``failed``'s, which stops the run as any failed ledger write does (``run_jobs``): the
    calls in flight finish within the grace (the lease has two thirds left at the last
    renewal's failure, 200 s at the default), and no new one starts.
    This task used to die with it, silently: the run went on with its leases no longer
    renewed (a worker's fed loop for hours), other processes took over and paid again for
    jobs it was still working on, and the error came out only at the loop's end."""
    due = awake_clock() + lease_s / 3
    held_elsewhere = 0
    looked = awake_clock()
    while True:
        await asyncio.sleep(min(RENEW_TICK_S, max(0.0, due - awake_clock())))
        try:
            # (at its pace, not at each try of rows held elsewhere)
            if look is not None and (not held_elsewhere or awake_clock() - looked >= RENEW_TICK_S):
                looked = awake_clock()
                look()
            if awake_clock() >= due - 0.01:  # the loop's timers may fire a hair early
                if held_elsewhere:
                    held_elsewhere = ledger.renew_leases(lease_s, stale=True)
                else:
                    held_elsewhere = ledger.renew_leases(lease_s)
                # rows another transaction held (a re-submit writing them): tried again in
                # moments, the loop free between tries, so a job whose lease ran out while it
                # was held is renewed as soon as it is let go
                due = awake_clock() + (RENEW_RETRY_S if held_elsewhere else lease_s / 3)
        except Exception as exc:
            if failed is None:
                raise
            failed(ledger.write_error(exc))
            return


def require_keys(providers: set[str]) -> None:
    """API keys come only from the environment; a missing one, or one no HTTP header can carry
    (``providers.key_problem``), stops the run before any job starts (and nothing is
    written). The message names the variable, never its value. So does a provider's base URL
    variable set to what no request can go to (``providers.malformed_bases``)."""
    from afc_cli.providers import malformed_bases, malformed_keys, missing_keys

    missing = missing_keys(providers)
    if missing:
        raise UsageError(
            "API key not set in the environment: "
            + ", ".join(missing)
            + " (afc reads provider keys only from the environment)"
        )
    malformed = malformed_keys(providers)
    if malformed:
        raise UsageError("API key cannot be sent: " + "; ".join(malformed))
    bases = malformed_bases(providers)
    if bases:
        raise UsageError("provider base URL cannot be used: " + "; ".join(bases))


def provider_limits(ledger: Ledger) -> dict[str, dict[str, int | None]]:
    """Per-provider call limits for a run: the strictest any batch in the ledger sets."""
    return merged_limits(row["limits_json"] for row in ledger.batches())


def merged_limits(limits: Iterable[str | None]) -> dict[str, dict[str, int | None]]:
    """The strictest of batches' ``limits`` (each as admitted: JSON, or None), per provider."""
    merged: dict[str, dict[str, int | None]] = {}
    for text in limits:
        for name, values in json.loads(text or "{}").items():
            current = merged.setdefault(name, {"concurrency": None, "per_minute": None})
            for key, value in values.items():
                if value is not None:
                    current[key] = value if current[key] is None else min(current[key], value)
    return merged


def batch_rates(ledger: Ledger, rows: list[dict[str, Any]] | None = None) -> dict[str, RateCards]:
    """Each batch's rate cards (of ``rows``, batches' rows; None: every batch), as recorded at
    its latest admission. A card admitted by an older afc that this one refuses (an amount of
    1,000,000 USD or more overflows the exact micro-USD arithmetic) stops the run before
    anything is written, naming the batch."""
    from afc_cli.costs import usd_problem

    cards = {}
    for row in ledger.batches() if rows is None else rows:
        data = json.loads(row["rates_json"] or "[]")
        for item in data:
            for unit, amount in item["prices"].items():
                problem = usd_problem(amount)
                if problem:
                    raise UsageError(
                        f"batch {row['name']!r} has the rate card {item['provider']}/"
                        f"{item['model']} {unit} that {problem}; submit its manifest again "
                        "with a corrected card"
                    )
        cards[row["name"]] = RateCards.from_json(data)
    return cards
