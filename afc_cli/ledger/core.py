"""The ledger's operations and their meaning, written once for every engine.

Every state change is one transaction (``Ledger.tx``), and a step's checkpoint is written in the
same transaction as its effect. The SQL here runs on SQLite and PostgreSQL alike (``?``
placeholders, which the PostgreSQL backend translates; ``INSERT ... ON CONFLICT``; conditional
``UPDATE ... WHERE status``); the engine details (connection, transactions, group commit,
migrations, durability) are in sqlite.py and postgres.py beside this file.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import difflib
import json
import math
import os
import signal
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from afc_cli import ledger_file
from afc_cli.conflicts import changes_since, inputs_changed
from afc_cli.costs import RateCards, plural
from afc_cli.errors import (
    SHOWN_BATCHES,
    LedgerError,
    ManifestError,
    UsageError,
    ledger_write_error,
    several_batches,
)
from afc_cli.gates import (
    HELD,
    Change,
    Gates,
    Regate,
    gate_kept,
    refused_dependent,
)
from afc_cli.owner import (
    awake_clock,
    fingerprint_of,
    host_lease,
    host_lease_of,
    host_of,
    is_host_lease,
    is_spool_hold_of,
    lease_held,
    owner_is_dead,
    process_gone,
    sees_process,
)
from afc_cli.secrets import map_leaves, scrub, scrub_data, visible
from afc_cli.storage import shown_url

# rejected: a person refused a reviewed output (afc_cli/review.py); final, like the others
TERMINAL = ("succeeded", "failed", "cancelled", "dead", "rejected")
# statuses of a job whose output is rendered and stored: it reads no input again
RENDERED = ("succeeded", "awaiting_review", "rejected")
ADMIT_CHUNK = 5000  # jobs admitted per round of statements (one transaction for them all)
ACTIVE = ("queued", "running", "waiting")
# the waiting reason of a job whose provider renders a request a run polls (``_rendering``)
RENDERING = "provider still rendering: "
# the end of a waiting reason of a job whose synchronous provider's paid render is fetched
# from the output URL its answer named (``record_answer_url``, ``_rendering``)
AT_URL = "'s paid output, fetched from the URL its answer named"
# the lease expiry of a moved ledger's jobs (``owner.MOVED_OWNER``): never
MOVED_UNTIL = 9e18
# where ``afc ledger copy`` moved a ledger's work, its last move (m010)
LAST_MOVE_SQL = "SELECT destination, moved_at FROM ledger_moves ORDER BY moved_at DESC LIMIT 1"
# A destination's own ``ledger_moves`` row while ``afc ledger copy`` has not yet marked its
# source moved (afc_cli/ledger/copy.py): the copy runs nothing until then, as a moved ledger,
# so a copy stopped between the two commits (SIGKILL) never leaves both ledgers running.
# Followed by the source's name (``copy.ledger_name``).
COPY_UNFINISHED = "nowhere yet: it is an unfinished copy of "


def unfinished_copy_source(destination: str) -> str | None:
    """The source an unfinished copy names in its own ``ledger_moves`` row
    (``COPY_UNFINISHED``), or None for a move row that is a real move's."""
    if destination.startswith(COPY_UNFINISHED):
        return destination[len(COPY_UNFINISHED) :]
    return None


def moved_line(moved_to: str, there: str) -> str:
    """What a reading command says of a moved ledger (``moved_to``: its ``ledger_moves``
    row's destination), ``there`` what the reader does in the ledger it moved to; or of an
    unfinished copy (its own row, ``COPY_UNFINISHED``: its source was not marked moved yet)."""
    source = unfinished_copy_source(moved_to)
    if source is not None:
        return (
            f"this ledger is a copy of {source} that 'afc ledger copy' did not finish: it runs "
            f"nothing, and {source} still runs its jobs; copy again to finish the move"
        )
    return f"this ledger was moved to {moved_to} (afc ledger copy): {there}"


IN_CHUNK = 500  # values per IN (...) list: well under every engine's limit on parameters
STREAM_ROWS = 1000  # rows a listing read from the ledger holds at a time (Ledger._stream)
# A backstop for runs that keep dying outside provider calls (which cost nothing but never
# finish the job): dead-lettered after this many takeovers. Runs dying *during* calls are
# bounded much sooner, by AFC_MAX_INTERRUPTS (pipeline.py), since each may have been paid.
MAX_TAKEOVERS = 20
# How often a worker's claim looks first for the jobs of dead processes on its host
# (``Ledger.claim_runnable``)
HERE_CHECK_S = 10.0
INTERRUPTED_MESSAGE = (
    "the process running this attempt ended before it reported; the provider may have charged "
    "for it"
)


def _crash_point(name: str) -> None:
    """A named crash point (afc_cli/pipeline.py ``crash_point``), armed by crash tests."""
    if os.environ.get("AFC_CRASH_POINT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


def stall_point(name: str, before: Callable[[], None] | None = None) -> None:
    """Freeze here, as a SIGSTOP, a paused VM or a swap storm would, when a test arms this
    point (AFC_STALL_POINT=name, or several names with commas); the test sends SIGCONT. Here,
    beside ``_crash_point``, so that a command that never runs the pipeline (``afc cancel``)
    arms one without importing it. ``before``: e.g. commit first, so that the frozen run
    holds no write lock while the test's other commands run."""
    if name in os.environ.get("AFC_STALL_POINT", "").split(","):
        if before is not None:
            before()
        os.kill(os.getpid(), signal.SIGSTOP)


def fail_point(name: str) -> None:
    """Raise here an error afc does not expect, as a bug of its own would, when a test arms
    this point (AFC_FAIL_POINT=name): what a run does with its other jobs' paid calls then
    (``run._all_done``) is tested through the real command."""
    if name in os.environ.get("AFC_FAIL_POINT", "").split(","):
        raise RuntimeError(f"fail point {name} (AFC_FAIL_POINT)")


def _now() -> float:
    return time.time()


# A lease renewal whose statement took longer than this (it waited for a row, or the host
# stalled) writes its lease again, reckoned from then (``Ledger._write_lease``)
LEASE_WAIT_REWRITE_S = 0.5


# how far a call's end by the wall clock may be from its start plus its length by
# ``owner.awake_clock`` before the wall clock is taken to have stepped during the call
# (``report_attempt``): NTP's slewing moves it by at most half a millisecond a second
CLOCK_STEP_S = 1.0


# The texts scrubbed while one walk fails a need's dependents (``Ledger._fail_dependents``),
# or puts them back (``_reblock_dependents``):
# each dependent's error message and event detail are the same few texts, and scrubbing
# them anew for each of 100,000 shots behind a rejected style frame was half of the
# decision, which holds the ledger's write lock (41 s: a submit meanwhile failed 'database
# is locked'). The secrets they are checked against do not change meanwhile
# (``secrets.scrub_data``'s ``_seen``). A context variable: another thread's or task's
# writes never share it.
_SCRUB_MEMO: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "afc_scrub_memo", default=None
)


@contextlib.contextmanager
def _scrubbing_once() -> Iterator[None]:
    """Within the block, this context's ledger writes scrub each distinct text once
    (``_SCRUB_MEMO``)."""
    memo = _SCRUB_MEMO.set({})
    try:
        yield
    finally:
        _SCRUB_MEMO.reset(memo)


# ``json.dumps`` with any option builds a new encoder per call; one made once writes the same
# text (steps, usage and events are written several times a job)
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


def _dumps(value: Any) -> str | None:
    return None if value is None else _ENCODER.encode(value)


def _json_safe(value: Any) -> Any:
    """``value`` with every float that is not finite (a provider's ``NaN`` usage count) as its
    text: the ledger's JSON, and every ``--json`` made from it, stays valid JSON."""
    return map_leaves(
        value,
        lambda leaf: str(leaf) if isinstance(leaf, float) and not math.isfinite(leaf) else leaf,
    )


# the most of one usage value's JSON text an attempt's row keeps (a count is a few digits)
MAX_USAGE_VALUE_CHARS = 200


def usage_kept(usage: dict[str, Any] | None) -> Any:
    """A provider's usage as an attempt's row keeps it (``_json_safe``), each value whose JSON
    text is longer than ``MAX_USAGE_VALUE_CHARS`` kept as its length: a count the provider
    sent as a 5 MB text (or an array of 200,000 numbers) was kept whole, and every 'afc show'
    printed it, as an error message of megabytes was before ``providers.base.bounded``. No
    count is that long, and none is priced (``usage_amount``)."""
    if not usage:
        return usage
    kept = {}
    for unit, value in usage.items():
        if isinstance(value, str | list | dict):
            size = len(value) if isinstance(value, str) else len(json.dumps(value, default=str))
            if size > MAX_USAGE_VALUE_CHARS:
                value = f"(a value of {size} characters, not kept)"
        kept[unit] = value
    return _json_safe(kept)


def _marks(values: list[Any]) -> str:
    """``(?, ?, ...)``: one placeholder per value, for ``IN`` lists any engine runs."""
    return "(" + ", ".join("?" * len(values)) + ")"


def _in(values: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


TERMINAL_SQL = _in(TERMINAL)
# What a job's end or review pause tells its receiver, as the job's row has it when it is
# written (``finish``, ``await_review``), not as the run claimed it: a re-submit sets the
# webhook of every unfinished job (``admit``), also of one a run holds, whose events went to
# the webhook of its claim (none: they were never queued); and a retry's count names its event
RETURNED_NEWS = "webhook_json, retries"
# Whose call an attempt still ``started`` is (``CALLS_OWNER_SQL``, for ``owner.process_gone``
# with the job's lease expiry): the lease holder of an active job; of a job that has ended
# (cancelled while a live run's call was in flight: ``Ledger.cancel`` keeps that run's lease
# expiry) the attempt's own owner. While that run lives the call is in flight: no cost yet,
# known or unknown, and counted nowhere. Once it is gone (it died before the answer came, or
# its lease ran out) the call is possibly paid, of unknown outcome, and counted as an
# ``unknown`` attempt would be (``Ledger.gone_calls``, ``Ledger.cost_groups``, and 'afc
# show', which lists it ``started`` until then: afc_cli/report.py).
CALLS_OWNER_SQL = (
    f"CASE WHEN j.status IN {TERMINAL_SQL} THEN (SELECT MAX(a.owner) FROM attempts a"
    " WHERE a.job_id = j.id AND a.status = 'started') ELSE j.lease_owner END"
)
# A job's cost by the one rule (afc_cli/costs.py job_cost): the sum of its known attempt costs,
# how many attempts are unpriced, and how many attempts it made (``jobs.attempts``, the latest
# attempt's number: 0 for a job that never called a provider); ``j`` is the jobs table. Its
# unpriced calls still ``started`` (``calls_started``), whose they are and the job's lease,
# for ``Ledger.gone_calls``: those of a run that is gone count as unpriced too, as ``afc
# costs report`` counts them.
JOB_COST_SQL = (
    "(SELECT CAST(SUM(a.cost_micros) AS BIGINT) FROM attempts a WHERE a.job_id = j.id)"
    " AS cost_micros,"
    " (SELECT COUNT(*) FROM attempts a WHERE a.job_id = j.id AND a.cost_micros IS NULL"
    " AND a.status <> 'started') AS unpriced_attempts,"
    " (SELECT COUNT(*) FROM attempts a WHERE a.job_id = j.id AND a.cost_micros IS NULL"
    f" AND a.status = 'started') AS calls_started, {CALLS_OWNER_SQL} AS calls_owner,"
    " j.lease_owner, j.lease_expires, j.lease_mono, j.attempts AS attempts_made"
)
# What ``afc status``, ``--json`` and the pictures show as a job's ``attempts``: its
# provider's answers (an attempt that ended, not cut off by afc's own end, as
# ``attempts.counted`` counts them for the chain); ``jobs.attempts`` is the latest attempt's
# number, which also counts interrupted ones and one in flight
ANSWERED_SQL = (
    "(SELECT COUNT(*) FROM attempts a WHERE a.job_id = j.id"
    " AND a.status IN ('succeeded', 'failed', 'unknown')"
    " AND COALESCE(a.error_class, '') != 'interrupted') AS attempts"
)
ACTIVE_SQL = _in(ACTIVE)
# A job that holds its output key against the other jobs of that key (``_check_output``):
# rendering it, or having stored an output under it. The words of the partial index's WHERE
# (afc_cli/migrations.py m011): SQLite uses the index only for a query that repeats them.
OUTPUT_HOLDERS_SQL = _in(("running", *RENDERED))
# The other jobs of an output key in a storage (params: output key, job id, batch, twice):
# those of m011's index, and the waiting ones (m013's index, ``status = 'waiting'`` word for
# word), of which one whose provider renders its request holds the key (``_check_output``)
_OUTPUT_OF_STORAGE = (
    " FROM jobs o JOIN batches ob ON ob.name = o.batch WHERE o.output_key = ?"
    " AND {status} AND o.id <> ? AND ob.storage = (SELECT storage FROM batches WHERE name = ?)"
)
# The jobs no run holds whose paid render of their key is spooled, not stored: queued again
# by ``afc retry`` at their store step, or dead-lettered there (STORE_FAILED, SPOOL_MISSING):
# the words of m014's partial index ``jobs_output_spooled``
OUTPUT_SPOOLED_SQL = "o.step = 'store' AND o.status IN ('queued', 'dead')"
# The jobs dead-lettered at their render step (CRASH_LOOP: the runs polling its request kept
# dying) whose last attempt is a Replicate or fal request the provider may still have: 'afc
# retry' polls it, paid already, and stores its render (``_requeue``'s rule, the provider's
# 'no longer has' answer aside: providers.base.GONE_PREFIX). Found through m016's partial
# index ``jobs_output_poll_left`` (its words first), then their last attempt.
OUTPUT_POLL_LEFT_SQL = (
    "o.status = 'dead' AND o.step = 'render' AND EXISTS (SELECT 1 FROM attempts a"
    " WHERE a.job_id = o.id AND a.number = o.attempts AND a.status IN ('unknown', 'started')"
    " AND a.provider_request_id IS NOT NULL"
    " AND COALESCE(a.error_message, '') NOT LIKE 'the provider no longer has request%')"
)
OUTPUT_HOLDERS_LOOKUP = (
    "SELECT o.key, o.batch, o.status, o.lease_owner, o.lease_expires, NULL, o.step, NULL, o.id,"
    " o.lease_mono"
    + _OUTPUT_OF_STORAGE.format(status=f"o.status IN {OUTPUT_HOLDERS_SQL}")
    + " UNION ALL SELECT o.key, o.batch, o.status, o.lease_owner, o.lease_expires,"
    " o.waiting_reason, o.step, NULL, o.id, o.lease_mono"
    + _OUTPUT_OF_STORAGE.format(status="o.status = 'waiting'")
    + " UNION ALL SELECT o.key, o.batch, o.status, o.lease_owner, o.lease_expires, NULL,"
    " o.step, o.error_code, o.id, o.lease_mono"
    + _OUTPUT_OF_STORAGE.format(status=OUTPUT_SPOOLED_SQL)
    + " UNION ALL SELECT o.key, o.batch, o.status, o.lease_owner, o.lease_expires, NULL,"
    " o.step, o.error_code, o.id, o.lease_mono FROM jobs o WHERE o.output_key = ? AND o.id <> ?"
    " AND o.batch IN (SELECT name FROM batches"
    " WHERE storage = (SELECT storage FROM batches WHERE name = ?))"
    f" AND {OUTPUT_POLL_LEFT_SQL}"
)
# A run's candidates: the active jobs and the blocked ones (run when their needs have succeeded)
RUNNABLE_SQL = _in((*ACTIVE, "blocked"))


# A delivery made pending again, due now (its one parameter: the ledger's clock), its tries
# counted afresh and no process's lease on it: a replay's, of one event or of every dead one
# (``Ledger.requeue_delivery``, ``Ledger.requeue_dead_deliveries``)
REQUEUED = (
    "status = 'pending', attempts = 0, next_attempt_at = ?, last_error = NULL,"
    " lease_owner = NULL, lease_expires = NULL"
)


def batches_with(
    pairs: dict[tuple[str, str], tuple[int, float | None]], *statuses: str
) -> list[str]:
    """The batches ``Ledger.status_pairs`` says have jobs of one of ``statuses``."""
    return sorted(
        {name for (name, status), (count, _) in pairs.items() if status in statuses and count}
    )


def _batch_scope(batch: str | None, column: str = "batch") -> tuple[str, list[Any]]:
    """The condition (and its parameters) for the jobs of ``batch``, or of every batch. Every
    batch is named as the batches table's names, a condition on the (batch, status,
    created_at) index's first column, so that a query by status with no batch ('afc resume',
    'afc worker') looks each batch's statuses up in that index on both engines: with no
    condition on batch, SQLite read every job row of the ledger to find the few unfinished
    ones (each poll of a worker on a ledger of 410,000 finished jobs took 6 s)."""
    if batch is not None:
        return f"{column} = ?", [batch]
    return f"{column} IN (SELECT name FROM batches)", []


def _claim_scope(batch: str | None, status: str, column: str = "batch") -> tuple[str, list[Any]]:
    """A worker's claim's condition: ``status`` (a condition on the job's status, in the words
    of a partial index's WHERE) for the jobs of ``batch``, or of every batch. Every batch is
    no condition on the batch at all, unlike ``_batch_scope``: the claim reads the jobs it
    looks at from the partial indexes in claim order that hold those alone (m017's free
    runnable jobs, m018's leased runnable and blocked ones), where a look-up per batch and
    status ever admitted grew with the ledger's history (2.5 ms of SQLite and 7.5 ms of
    PostgreSQL server time an idle poll at 500 batches).

    ``column`` is the batch column in the indexes' code point order (``Ledger.CODE_POINT``:
    ``batch COLLATE "C"`` on PostgreSQL, where equality is the same): a batch named under the
    column's default collation was no condition on those indexes, and once PostgreSQL kept
    a worker's generic plan ('afc worker --batch', at its tenth claim or so) each claim read
    every unfinished job of the batch through the (batch, status) index and sorted them (26
    ms a claim of 64 with 20,000 queued, 2.4 ms read from m017's index)."""
    if batch is not None:
        return f"{column} = ? AND {status}", [batch]
    return status, []


# The run id of the attempts of workers that share a budget: this prefix and its name
# (afc_cli/worker.py), where a submit's or resume's run has a UUID of its own
SHARED_BUDGET = "budget:"
# The event 'afc cancel' writes for a job-style request the provider said had completed before
# the cancel came (rendered and billed; ``Provider.cancel_answer``): a retry polls it by its id
CANCEL_TOO_LATE = "provider_cancel_too_late"
# The event 'afc cancel' writes for a request the provider was not seen to stop (the key not
# set where the cancel ran, no answer, an error status): it may render on, paid, so a retry
# polls it by its id too
CANCEL_FAILED = "provider_cancel_failed"
PROVIDER_CANCELS = ("provider_cancel_sent", CANCEL_FAILED, CANCEL_TOO_LATE)
# A job's last attempt (``a``, joined to its job ``j``) since its retry that a run which stopped
# or died left at its provider: ``unknown``, or ``started`` by another process than
# ``{holder}`` (a dead run's, made ``unknown`` by the claim); ``LEFT_KEPT``: one the next run
# can take over, its request id or its answer's URL kept (``Ledger.left_requests``,
# ``adopting_elsewhere``)
LEFT_AT_PROVIDER = (
    "a.job_id = j.id AND a.number = j.attempts AND a.number > j.attempt_base"
    " AND (a.status = 'unknown' OR a.status = 'started' AND a.owner <> {holder})"
)
LEFT_KEPT = "(a.provider_request_id IS NOT NULL OR a.answer_url IS NOT NULL)"
# A need that ended so fails the jobs that wait for it (DEPENDENCY_FAILED)
NEED_FAILED = ("failed", "rejected", "cancelled", "dead")


def ended_needs(needs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Of a job's needs (``Ledger.needs_of``), those that ended badly or are missing from the
    ledger: any one fails the job with DEPENDENCY_FAILED (``Ledger.settle_blocked``)."""
    return [n for n in needs if n["status"] is None or n["status"] in NEED_FAILED]


class BudgetExhausted(Exception):
    """The next attempt's estimate does not fit the run's budget; nothing was started."""

    def __init__(self, spent: int, cap: int, estimate: int, *, priced: bool = True):
        super().__init__(f"spent {spent} of {cap} micro-USD; next attempt needs {estimate}")
        self.spent = spent
        self.cap = cap
        self.estimate = estimate
        # False: the attempt's model has no estimate (run with --allow-unpriced), which
        # reserves nothing (``estimate`` 0) and is refused only once the spend is past the
        # cap; its estimate is unknown, never said to be 0
        self.priced = priced


class ReviewRace(Exception):
    """A review decision found its job no longer awaiting review (decided meanwhile), or, with
    ``now`` (the output's SHA-256 the job has now), awaiting review with another output than
    the one the decision was about (``expected``: rendered again meanwhile)."""

    def __init__(self, key: str, batch: str, expected: str | None = None, now: str | None = None):
        super().__init__(key)
        self.key = key
        self.batch = batch
        self.expected = expected
        self.now = now


class ProviderBusy(Exception):
    """A provider's shared limit (manifest ``limits``) is reached across every process of this
    ledger: the attempt was not started; try again after ``retry_after`` seconds."""

    def __init__(self, provider: str, reason: str, retry_after: float):
        super().__init__(f"{provider}: {reason}")
        self.provider = provider
        self.reason = reason
        self.retry_after = retry_after


def _held() -> bool:
    return True


def _pending_render(
    key: str, batch: str, status: str, reason: str | None, step: str, error: str | None
) -> tuple[str, str, bool] | None:
    """Of another job of an output key that no live run works on (``Ledger._check_output``):
    what paid render of the key it holds that can still be stored without paying again, and
    what stores it; None when it holds none (it stored its output, or its render, if any, is
    lost: another job may render the key). A request a stopped run left at a job-style
    provider is polled by the next run of its batch; a render spooled and not stored (its run
    died or stopped at the store step, or storage failed) is stored by the next run on the
    host whose spool has it. A dead-lettered one waits for a person's ``afc retry``; one whose
    spool file was damaged holds nothing (its retry renders anew). The last item: whether only
    a person's decision stores it (``OutputHeld.final``)."""
    resume = f"'afc resume --batch {batch}' stores it"
    if status == "waiting" and (reason or "").startswith(RENDERING):
        held = "whose provider renders (or has rendered) a paid request a stopped run left"
        return held, resume, False
    if status == "dead" and step == "render":  # (OUTPUT_POLL_LEFT_SQL: a request left)
        held = (
            "whose provider renders (or has rendered) a paid request its runs left "
            f"(dead-lettered, {error})"
        )
        return held, f"'afc retry {key} --batch {batch}' polls and stores it", True
    if step != "store" or error == "SPOOL_DAMAGED":
        return None
    if status == "dead":
        held = f"whose paid render is spooled and not stored (dead-lettered, {error})"
        return held, f"'afc retry {key} --batch {batch}' stores it", True
    return "whose paid render is spooled and not stored yet", resume, False


class OutputBusy(Exception):
    """Another job of this output key in this storage is rendering it (its attempt started,
    its lease live): the attempt was not started; look again after ``retry_after`` seconds
    (``Ledger._check_output``). No ``key`` (None): another process was checking this output
    key at the same moment (PostgreSQL), and the look is tried again at once."""

    def __init__(self, batch: str | None, key: str | None, retry_after: float):
        super().__init__(f"job {key!r} of batch {batch!r} is rendering this output key")
        self.batch = batch
        self.key = key
        self.retry_after = retry_after


class OutputHeld(Exception):
    """Another job of this output key in this storage has a paid render of it that no run is
    working on now and that can still be stored without paying again: a request a stopped
    run left at a job-style provider (Replicate, fal), or a render spooled and not stored. The
    attempt was not started (``Ledger._check_output``). ``how``: what stores that render (a
    command for a person); ``final``: only a person's decision does (that job is dead-lettered),
    so the job ends rather than wait for it; ``job_id``: that job's id (a run that runs it too
    waits for it: ``pipeline.run_job``)."""

    def __init__(
        self,
        batch: str,
        key: str,
        held: str,
        how: str,
        final: bool = False,
        job_id: str | None = None,
    ):
        super().__init__(f"job {key!r} of batch {batch!r} holds a paid render of this output key")
        self.batch = batch
        self.key = key
        self.held = held
        self.how = how
        self.final = final
        self.job_id = job_id

    def said(self, output_key: str) -> str:
        """Which job holds ``output_key``, with what, and what stores it: the words of the
        waiting job's reason and of a worker that leaves it (``worker.work``)."""
        return (
            f"output key {output_key} is held by job {self.key!r} of batch {self.batch!r}, "
            f"{self.held}: {self.how}"
        )


class JobLost(Exception):
    """The job stopped being ours (it ended elsewhere, e.g. cancelled, or its lease was taken):
    the worker stops quietly and the transaction that noticed writes nothing."""


@dataclass
class AdmitResult:
    batch: str
    storage: str
    new: list[str] = field(default_factory=list)
    replayed: list[str] = field(default_factory=list)
    # each {"key", "stored_hash", "new_hash", "changes": [{"field", "old", "new"}], "status",
    # "inputs_changed": [the admitted input files changed on disk since, as named]}
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    # where each conflicting job of a jobs_from list stands in it (key -> ``jobs.csv line
    # 4``), for its message (``conflicts.conflict_message``): not part of --json's conflicts
    places: dict[str, str] = field(default_factory=dict)
    # replayed jobs not yet rendered whose review or needs this admission changed, each
    # {"key", "review"?, "needs"?}; and the changes that could not take effect, each
    # {"key", "field", "admitted", "manifest", "status", "why"} (afc_cli/gates.py)
    gates_changed: list[dict[str, Any]] = field(default_factory=list)
    gates_kept: list[dict[str, Any]] = field(default_factory=list)
    # the live afc processes holding jobs of the batch when this admission changed its rate
    # cards ('pid N on HOST'): they go on pricing and budgeting by the cards they began with
    cards_kept_by: list[str] = field(default_factory=list)
    # the cards ('provider/model') the batch had and this admission's manifest (with
    # AFC_CONFIG's file) does not: their models' attempts are unpriced from now on
    cards_dropped: list[str] = field(default_factory=list)

    @property
    def admitted_keys(self) -> list[str]:
        return self.new + self.replayed


def _cost_filters(
    batch_column: str, time_column: str, batch: str | None, since: float | None
) -> tuple[list[str], list[Any]]:
    where, params = ["1 = 1"], []
    if batch is not None:
        where.append(f"{batch_column} = ?")
        params.append(batch)
    if since is not None:
        where.append(f"{time_column} >= ?")
        params.append(since)
    return where, params


def other_storage(batch: str, bound: str, named: str) -> str:
    """Why a run naming storage ``named`` for a batch bound to ``bound`` is refused (``Ledger
    .check_storage``; ``afc plan`` says the same): both as afc prints a storage, which reads
    back as the same place."""
    return (
        f"batch {batch!r} stores its outputs in {shown_url(bound)}, not {shown_url(named)}; "
        "a batch keeps the storage it was first admitted with, so no output is "
        "rendered twice into two places. Use that storage or a new batch name."
    )


def refuse_shared_outputs(
    manifest: Any,
    jobs: list[Any],
    existing: dict[str, tuple],
    outputs: dict[str, str],
    folders: dict[str, str] | None = None,
) -> None:
    """A new job whose output key a job admitted to the batch earlier has (another manifest
    of the batch, or a jobs_from list, giving two keys one ``output``), or whose output key
    lies inside an admitted job's or is a folder of one (``x/a.png`` and ``x/a.png/b.png``:
    a file cannot also be a folder, so one of the two renders would be paid for and never
    stored): the admission is refused (ManifestError, exit 2, nothing admitted), as two jobs
    of one manifest are (``manifest.nested_output_problems``). One of them could only ever
    end OUTPUT_KEY_CONFLICT. ``afc plan`` refuses it alike. ``folders``: a dict the caller
    keeps across the calls of one admission (its chunks), filled at the first new job with
    each folder of an admitted output key (its job's key), so the batch is walked once."""
    if not outputs:  # a batch's first admission: nothing to share a key with
        return
    from afc_cli.manifest import MAX_PROBLEMS

    if folders is None:
        folders = {}
    problems = []
    for job in jobs:
        if job.key in existing:
            continue
        key = job.output_key
        holder = outputs.get(key, job.key)
        if holder != job.key:
            problems.append(
                (
                    job,
                    f"output key {key!r} is job {holder!r}'s, admitted to batch "
                    f"{manifest.batch!r} before; each job needs its own",
                )
            )
            continue
        parts = key.split("/")
        for end in range(1, len(parts)):
            folder = "/".join(parts[:end])
            holder = outputs.get(folder)
            if holder is not None:
                problems.append(
                    (
                        job,
                        f"output key {key!r} lies inside job {holder!r}'s output key "
                        f"{folder!r}, admitted to batch {manifest.batch!r} before; one output "
                        "key cannot be a folder of another",
                    )
                )
                break
        else:
            if not folders:
                for admitted in outputs:
                    at = admitted.rfind("/")
                    while at > 0:
                        folders.setdefault(admitted[:at], admitted)
                        at = admitted.rfind("/", 0, at)
                folders[""] = ""  # walked (no output key has an empty folder)
            inner = folders.get(key)
            if inner:
                problems.append(
                    (
                        job,
                        f"output key {key!r} is a folder of job {outputs[inner]!r}'s output "
                        f"key {inner!r}, admitted to batch {manifest.batch!r} before; one "
                        "output key cannot be a folder of another",
                    )
                )
        if len(problems) >= MAX_PROBLEMS:
            break
    if problems:
        # a job of a jobs_from list is named by its file and line, as the loader names its
        # other problems (the file, the job and the field); an inline job by its key
        where = list_places(manifest, {job.key for job, _ in problems})
        raise ManifestError(
            str(manifest.path),
            [
                (f"{where[job.key]} (key {job.key!r})" if job.key in where else f"job {job.key!r}")
                + f": field 'output': {why}"
                for job, why in problems[:MAX_PROBLEMS]
            ],
        )


def list_places(manifest: Any, keys: set[str]) -> dict[str, str]:
    """Where the jobs of ``keys`` that come from the manifest's ``jobs_from`` list stand in
    it (``jobs.csv line 4``), for a refusal or a conflict to name, as the loader names a
    line's problems (``JobList.places``); none for a manifest without a list."""
    places = getattr(manifest.jobs, "places", None)
    return places(keys) if places is not None and keys else {}


def backend(url: Any) -> type[Ledger]:
    """The ledger class a ``--ledger`` value names (afc_cli/ledger_file.py parses it)."""
    if ledger_file.is_postgres(url):
        from afc_cli.ledger.postgres import PostgresLedger

        return PostgresLedger
    ledger_file.ledger_path(url)  # refuses URLs of engines afc has no backend for
    from afc_cli.ledger.sqlite import SqliteLedger

    return SqliteLedger


def open_ledger(url: Any, *, create: bool = True, check: bool = False) -> Ledger:
    """Open the ledger ``url`` names: SQLite for a path or ``sqlite:///``, PostgreSQL for
    ``postgresql://`` (psycopg 3, the ``postgres`` extra). Same operations, same meaning."""
    return backend(url)(url, create=create, check=check)


def _job_id(job: Any) -> str:
    return job.job_id


def _chunks(items: Any, size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _as_admitted(
    inputs: list[dict[str, Any]] | None, restates: dict[str, str] | None
) -> list[dict[str, Any]] | None:
    """A new job's inputs (``Ledger._insert_admitted``), each job input's request hash the one
    its need was admitted with where that need was found the same request by the rule for an
    earlier afc's body (``restates``)."""
    if not inputs or not restates:
        return inputs
    return [
        {**item, "request_hash": restates[item["request_hash"]]}
        if "job" in item and item.get("request_hash") in restates
        else item
        for item in inputs
    ]


class Ledger:
    """Every ledger operation, written once in SQL that both engines run (``?`` placeholders,
    ``INSERT ... ON CONFLICT``, ``RETURNING``, conditional ``UPDATE ... WHERE status``).

    ``Ledger(url)`` opens the backend the URL names (``open_ledger``): a plain path or
    ``sqlite:///path`` is ``SqliteLedger`` (afc_cli/ledger/sqlite.py), ``postgresql://`` is
    ``PostgresLedger`` (afc_cli/ledger/postgres.py). A backend provides ``db`` (``execute``
    returning a DB-API cursor; ``db.conn.executemany``), ``tx``, ``flush``, ``committed``,
    ``grouped``, ``close``, ``path`` (where the spool goes beside) and the dialect hooks
    (``day_sql``); the operations below use nothing else.
    """

    # when this process's claims last looked for its host's dead processes' jobs (monotonic)
    _here_checked = float("-inf")

    # jobs this process's claims leave alone until then (monotonic), by id (``pause_claims``)
    _paused: dict[str, float] | None = None
    _paused_idle: set[str] | None = None

    # the attempts this process started and has not ended: (job id, number) -> (started_at,
    # ``owner.awake_clock`` then), so ``end_attempt`` measures the call's length on a clock no
    # step of the wall clock moves
    _began: dict[tuple[str, int], tuple[float, float]] | None = None

    def pause_claims(self, job_id: str, seconds: float, *, idle: bool = False) -> None:
        """This process's claims (``claim_runnable``: a worker's rounds) leave a job alone for
        ``seconds``: one whose storage work just gave up (``pipeline._storage_gave_up``) is not
        tried again at the next round, every ``--poll``, which spent its ``MAX_STORE_REQUEUES``
        in seconds of a storage outage. In this process only (the job's host lease keeps other
        hosts off it meanwhile, and its ``lease_mono`` this host's other workers: ``set_waiting``
        ``paused_s``; a person's ``afc resume`` tries it at once).

        ``idle``: meanwhile an ``afc worker --until-idle`` counts it as nothing left to run
        (``paused_idle``): a job whose model refused this process's key (``pipeline.render``)
        would otherwise hold the script's worker polling until the pause ended, then send one
        refused request, and again."""
        if self._paused is None:
            self._paused = {}
        self._paused[job_id] = time.monotonic() + seconds
        if idle:
            if self._paused_idle is None:
                self._paused_idle = set()
            self._paused_idle.add(job_id)

    def paused_idle(self) -> set[str]:
        """The jobs ``pause_claims(..., idle=True)`` paused, while paused."""
        return self._paused_idle & self._paused_ids() if self._paused_idle else set()

    def _paused_ids(self) -> set[str]:
        if not self._paused:
            return set()
        now = time.monotonic()
        self._paused = {j: until for j, until in self._paused.items() if until > now}
        return set(self._paused)

    def __new__(cls, path: Any = None, *args: Any, **kwargs: Any) -> Ledger:
        if cls is Ledger:
            cls = backend(path)
        return super().__new__(cls)

    def _one(self, sql: str, params: Any = ()) -> dict[str, Any] | None:
        cursor = self.db.execute(sql, params)
        row = cursor.fetchone()
        if row is None:
            return None
        return dict(zip([c[0] for c in cursor.description], row, strict=True))

    def _all(self, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        cursor = self.db.execute(sql, params)
        names = [c[0] for c in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def _stream(self, sql: str, params: Any = ()) -> Iterator[list[dict[str, Any]]]:
        """The rows of ``sql`` in lists of ``STREAM_ROWS``, read as they are taken: a listing
        of every job of a ledger grown over months (``afc status --json``, ``afc outputs
        --json``) held each row read before writing the first (100,000 jobs: 350-460 MB).
        Other queries may run between two chunks."""
        cursor = self.db.execute(sql, params)
        names = [c[0] for c in cursor.description]
        while chunk := cursor.fetchmany(STREAM_ROWS):
            yield [dict(zip(names, row, strict=True)) for row in chunk]

    def _event(self, job_id: str | None, batch: str | None, kind: str, **detail: Any) -> None:
        self.db.execute(
            "INSERT INTO events (job_id, batch, at, kind, detail_json) VALUES (?, ?, ?, ?, ?)",
            (
                job_id,
                batch,
                self.clock(),
                kind,
                _dumps(scrub_data(detail, _SCRUB_MEMO.get())) if detail else None,
            ),
        )

    # --- admission --------------------------------------------------------------------------

    def batch(self, name: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM batches WHERE name = ?", (name,))

    def batches(self) -> list[dict[str, Any]]:
        return self._all("SELECT * FROM batches ORDER BY created_at")

    def newer_migrations(self, wait: bool = False) -> list[str]:
        """The migrations applied to the ledger that this afc does not know (a newer afc's,
        applied since this process opened it); the engines read them (sqlite.py, postgres.py).
        ``wait``: after a migration under way has ended (its lock waited for), not the ones
        committed before it."""
        raise NotImplementedError

    def check_schema(self, wait: bool = False) -> None:
        """Between a worker's rounds: stop, exit 2, once a newer afc has migrated the ledger.
        Opening refuses such a ledger (``ledger_file.identity``), but a worker opened it
        before: left to claim, it would run on a schema it does not know (its statements on
        a changed table failing in the middle of its jobs on PostgreSQL, rows written
        without the new columns on SQLite). Here it holds no job and has no call in flight.
        ``wait``: a run's start (``run.run_jobs``), which may have opened the ledger while a
        newer afc migrated it (the open read the migrations committed before), waits for
        that migration to end first, as its claims would, then looks."""
        newer = self.newer_migrations(wait)
        if newer:
            raise LedgerError(
                f"the ledger {self.path} was migrated by a newer afc while this one ran (it "
                f"does not know {', '.join(newer)}); this afc stopped before claiming or "
                "admitting more jobs, with nothing in flight: upgrade afc here, then run it again"
            )

    def refuse_migrating(self) -> None:
        """Stop, exit 2, if another afc's migration of the ledger is under way: what a claim
        that waited for a lock past its bound (a worker's, between its rounds) had met, the
        migration's lock on ``jobs``. Nothing where that cannot be told (SQLite's write lock
        names no holder)."""

    def moved_to(self) -> dict[str, Any] | None:
        """Where ``afc ledger copy`` moved this ledger's work (its last move), or None."""
        return self._one(LAST_MOVE_SQL)

    def refuse_moved(self) -> None:
        """A ledger ``afc ledger copy`` moved elsewhere runs nothing (exit 2): a cron line or a
        worker left on it would pay for the jobs the destination's runs pay for too. Called
        by submit and resume before anything is written, by a worker at each round."""
        moved = self.moved_to()
        if moved is None:
            return
        source = unfinished_copy_source(moved["destination"])
        if source is not None:
            raise UsageError(
                f"the ledger {self.path} is a copy of {source} that 'afc ledger copy' did not "
                f"finish (it stopped before it marked {source} moved, so that ledger may still "
                "run its jobs): it runs and changes nothing, so no job is paid for in both. "
                f"Run 'afc ledger copy {source} {self.path}' again: it finishes the move, or "
                "copies the source anew"
            )
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(moved["moved_at"]))
        raise UsageError(
            f"the ledger {self.path} was moved to {moved['destination']} by 'afc ledger copy' "
            f"({when}): run afc there (--ledger); this one keeps its history for reading and "
            "runs nothing, so no job is paid for in both"
        )

    def hold_unmoved(self) -> None:
        """First in the transaction of a change a person makes outside a run (an admission, a
        review decision, a cancel, a retry): wait for a copy of this ledger under way, then
        refuse (``refuse_moved``) if it moved the ledger. The command's own look comes before
        its transaction; a change that then waited on the copy (PostgreSQL: its lock on the
        jobs table, ``lock_jobs``; SQLite: its write lock) was written into the moved source,
        which runs nothing, and the destination, whose runs go on, never had it: a job
        cancelled there was still rendered and paid for, a decision or an admission was
        lost."""
        self._wait_for_copy()
        self.refuse_moved()

    def _wait_for_copy(self) -> None:
        """Wait until no ``afc ledger copy`` of this ledger holds it. SQLite: nothing to do,
        the transaction began by taking the write lock, which the copy holds throughout."""

    def require_batch(self, name: str | None) -> None:
        """Every command's ``--batch``: a name the ledger does not know is a usage error (exit
        2) that lists the batches it does know, never an empty answer that looks like zero."""
        if name is None or self.batch(name) is not None:
            return
        # every one up to eight, else the eight newest, as a refused key's batches are: a
        # ledger a cron fed a batch an hour named its 1,001 batches, a line of 10,000
        # characters, the oldest first; the names nearest a mistyped one said apart
        known = [row["name"] for row in self.batches()]
        listed = several_batches(known) if known else "none yet"
        shown = known[-SHOWN_BATCHES:]
        nearest = [n for n in difflib.get_close_matches(name, known) if n not in shown]
        near = f"; nearest to it: {', '.join(nearest)}" if nearest else ""
        raise UsageError(f"no batch {name!r} in {self.path}; known batches: {listed}{near}")

    def check_storage(
        self, batch: str, storage: str | None, endpoint: str | None = None
    ) -> str | None:
        """The storage a batch is bound to; refuses a different one named explicitly, and
        (``endpoint``: ``storage.endpoint_of``, this environment's) the batch's S3 bucket
        reached through another endpoint than the one it was admitted through: one bucket
        name on two endpoints (two MinIOs, R2 and AWS) is two stores, and the other's probe
        finds none of the batch's outputs."""
        row = self.batch(batch)
        if row is None:
            return None
        if storage is not None and storage != row["storage"]:
            raise UsageError(other_storage(batch, row["storage"], storage))
        refused = other_endpoint(batch, row["storage"], row.get("storage_endpoint"), endpoint)
        if refused is not None:
            raise UsageError(refused)
        return row["storage"]

    def hold_endpoint(self, batch: str, endpoint: str | None) -> None:
        """Before a run of a batch's jobs: refuse it when this environment reaches the batch's
        storage through another endpoint than the batch's (``check_storage``). A batch
        admitted before afc recorded endpoints has this one recorded (a write only then: a
        worker's every round reads)."""
        if endpoint is None:  # none any S3 call can use: the storage check says so
            return
        row = self.batch(batch)
        if row is not None and row.get("storage_endpoint") is None:
            with self.tx():
                self.db.execute(
                    "UPDATE batches SET storage_endpoint = ? WHERE name = ?"
                    " AND storage_endpoint IS NULL",
                    (endpoint, batch),
                )
        self.check_storage(batch, None, endpoint)

    def mark_folder(self, batch: str, was: str | None, mark: str, host: str) -> None:
        """Record ``mark`` as the mark of the folder ``batch`` stores in, recorded by ``host``,
        where its mark is still ``was`` (``run.hold_folder`` reads the row again: of two runs
        recording at once, one is recorded)."""
        with self.tx():
            self.db.execute(
                "UPDATE batches SET storage_mark = ?, storage_mark_host = ? WHERE name = ?"
                + (" AND storage_mark IS NULL" if was is None else " AND storage_mark = ?"),
                (mark, host, batch) if was is None else (mark, host, batch, was),
            )

    def admit(
        self, manifest: Any, storage: str, rates: Any, endpoint: str | None = None
    ) -> AdmitResult:
        """Admit a manifest's jobs idempotently, in one transaction.

        Same key, same request hash: a replay (the existing job is used). Same key, another
        hash: a conflict, reported with both hashes, the stored job untouched; so is a new job
        that needs a conflicting key, in turn (``afc_cli/gates.py``). The first replay
        of a job that already succeeded is a render avoided, and is recorded as one with what
        it would have cost (the original render's cost, else the rate card's price).
        """
        rates_json = rates.to_json()
        result = AdmitResult(batch=manifest.batch, storage=storage)
        # the ledger's clock (the database server's on PostgreSQL): a job's age (``afc queue
        # stats``) is measured on it, whichever host admitted the job and whichever asks
        now = self.clock()
        with self.tx():
            # a newer afc migrating the ledger as this command opened it (the open read the
            # migrations committed before): waited for, then refused (exit 2), nothing
            # admitted; this admission's writes waited for the migration's lock and then wrote
            # the jobs with this older code on the newer schema. First in the transaction, so
            # its lock (PostgreSQL: the migration lock, shared) comes before the jobs', in the
            # migration's own order
            self.check_schema(wait=True)
            self.hold_unmoved()
            before = self.db.execute(
                "SELECT rates_json FROM batches WHERE name = ?", (manifest.batch,)
            ).fetchone()
            # created_at is ``now`` only for a batch this admission adds (``batches_grew``)
            new_batch = self.db.execute(
                "INSERT INTO batches (name, storage, rates_json, limits_json, manifest_path,"
                " created_at, updated_at, storage_endpoint) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (name) DO UPDATE SET rates_json = excluded.rates_json,"
                " limits_json = excluded.limits_json, manifest_path = excluded.manifest_path,"
                " updated_at = excluded.updated_at, storage_endpoint ="
                " COALESCE(batches.storage_endpoint, excluded.storage_endpoint)"
                " RETURNING created_at",
                (
                    manifest.batch,
                    storage,
                    _dumps(rates_json),
                    _dumps(manifest.limits),
                    manifest.path,
                    now,
                    now,
                    endpoint,
                ),
            ).fetchall() == [(now,)]
            # compared by price, not by text: a card written anew at the same price
            # ("0.05" as "0.050") changes nothing a run prices or reserves, and named the
            # live runs as pricing by an old card, to be stopped and resumed for nothing
            had = RateCards.from_text(before[0]).cards if before else None
            if had is not None and had != rates.cards:
                result.cards_kept_by = self._card_holders(manifest.batch, now)
                result.cards_dropped = [f"{p}/{m}" for p, m in sorted(had.keys() - rates.cards)]
            if not new_batch:
                # a re-submit writes jobs of the batch (their gates, ``_regate``; webhooks,
                # inputs) in its manifest's order: not beside a decision's walk over them,
                # which locks them a level at a time in id order (``_hold_walk``), taken
                # before any job's row. Beside a cancel of their style frame, a re-submit
                # giving two shots a new need deadlocked with it, one of the two failing.
                self._hold_walk([manifest.batch], shared=True)
            # checked once the batch's row is this transaction's: on PostgreSQL a first
            # admission of the batch committed meanwhile (another host's submit naming another
            # storage, whose row this upsert waited for) is seen here, not before it
            self.check_storage(manifest.batch, storage, endpoint)
            existing: dict[str, tuple] = {}
            outputs: dict[str, str] = {}  # the batch's output keys, each its job's key
            for row in self.db.execute(
                "SELECT key, request_hash, status, id, webhook_json, review, attempts,"
                " lease_owner, lease_expires, lease_mono, output_key FROM jobs WHERE batch = ?",
                (manifest.batch,),
            ):
                existing[row[0]] = row[1:10]
                outputs[row[10]] = row[0]
            # In chunks, so a big job list (jobs_from) is never held in memory whole; still
            # one transaction, so a list that fails part-way leaves nothing admitted (in the
            # engine's admission cache: SqliteLedger.admission_cache).
            # A new job that needs a key refused as a conflict is refused with it, and a
            # replayed job not yet rendered takes the manifest's review and needs
            # (afc_cli/gates.py); one whose need comes later in the list is decided at the end.
            gates = Gates(self.batch_needs(manifest.batch))
            folders: dict[str, str] = {}  # refuse_shared_outputs's, made once if needed
            # the replayed jobs' new webhooks and input files' places, of every round, written
            # after the last (``_rewrite``)
            rewebhooked: list[tuple[str | None, str]] = []
            refiled: list[tuple[str, list[dict[str, Any]]]] = []
            # and the replayed jobs' new gates (``_regate``)
            regated: list[tuple[Regate, Change]] = []
            with self.admission_cache():
                for chunk in _chunks(manifest.jobs, ADMIT_CHUNK):
                    refuse_shared_outputs(manifest, chunk, existing, outputs, folders)
                    self._admit_chunk(
                        manifest.batch,
                        chunk,
                        existing,
                        rates,
                        now,
                        result,
                        gates,
                        rewebhooked,
                        refiled,
                        regated,
                    )
                fresh, conflicts = [], []
                for item, outcome in gates.settle_all():
                    if isinstance(item, Regate):  # admitted already: never refused here
                        self._regate(manifest.batch, item, outcome, now, result, regated)
                        result.replayed.append(item.key)
                        if item.webhook != _dumps(item.job.webhook):
                            rewebhooked.append((_dumps(item.job.webhook), item.job_id))
                    elif outcome is None:
                        fresh.append(item)
                    else:
                        conflicts.append(refused_dependent(item, None, outcome))
                self._insert_admitted(manifest.batch, fresh, conflicts, now, result, gates.restates)
                self._rewrite(rewebhooked, refiled, regated, manifest.batch, now, result)
                result.gates_kept.extend(gates.kept)
            if result.cards_dropped:
                result.cards_dropped = self._cards_still_called(
                    manifest.batch, result.cards_dropped
                )
        if new_batch:
            self.batches_grew()
        if result.conflicts:
            result.places = list_places(manifest, {c["key"] for c in result.conflicts})
        return result

    def _rewrite(
        self,
        rewebhooked: list[tuple[str | None, str]],
        refiled: list[tuple[str, list[dict[str, Any]]]],
        regated: list[tuple[Regate, Change]],
        batch: str,
        now: float,
        result: AdmitResult,
    ) -> None:
        """Write what a re-submit changes on replayed jobs a run may be holding: their
        webhooks (``_rewebhook``) and their input files' places (``_refile_inputs``). Their
        rows are taken all at once first, never one by one: a run holding some of these jobs
        writes their rows too (its renewal, every job it holds in one statement), and the two,
        each holding a row the other wanted next, deadlocked (``_lock_together``). Once, for
        every round of the admission (``ADMIT_CHUNK`` jobs each): a round's rows taken while
        the earlier rounds' were held made the run's renewal wait for those while it held the
        next round's, which the re-submit tried for, then waited for, the run stopped
        ('lock timeout', or 'deadlock detected'). So are the replayed jobs' new gates
        (``regated``, ``_regate``), which a run's renewal (a run stalled past its lease and
        woken) and a batch's cancel write too."""
        moved = self._refile_inputs(refiled) if refiled else []
        if not rewebhooked and not moved and not regated:
            return
        taken = [job_id for _, job_id in rewebhooked + moved] + [r.job_id for r, _ in regated]
        self._lock_together(taken)
        taken_at, awake_then = self.lease_clock(), awake_clock()
        for regate, change in regated:
            self._regate(batch, regate, change, now, result)
        if rewebhooked:
            self._rewebhook(rewebhooked)
        if moved:
            self.db.conn.executemany("UPDATE jobs SET inputs_json = ? WHERE id = ?", moved[:1])
            # tests freeze here: one job's row written, the others' not yet, in one transaction
            stall_point("refiled_one")
            self.db.conn.executemany("UPDATE jobs SET inputs_json = ? WHERE id = ?", moved[1:])
        self._give_back_time(taken, taken_at, awake_clock() - awake_then)

    def _give_back_time(self, job_ids: list[str], taken_at: float, held_s: float) -> None:
        """Lengthen the leases of the jobs whose rows ``_rewrite`` held by as long as it held
        them, where the lease was live when it took them: their run cannot renew a row this
        transaction holds (on PostgreSQL it tries again every few milliseconds,
        ``PostgresLedger.renew_leases``), and a hold longer than what a lease had left (the
        re-submit stalled, or waiting on a stalled holder of a row of its own) let the lease
        run out under it. Let go, such a job was taken over at once by this re-submit's own
        run, or another host's, before its live run's next try: paid for again where the
        provider's request cannot be found again (OpenAI, Gemini)."""
        if held_s < LEASE_WAIT_REWRITE_S:
            return
        for chunk in _chunks(sorted(set(job_ids)), IN_CHUNK):
            self.db.execute(
                "UPDATE jobs SET lease_expires = lease_expires + ?, lease_mono = lease_mono + ?"
                f" WHERE id IN {_marks(chunk)} AND lease_owner IS NOT NULL"
                f" AND lease_expires > ? AND status NOT IN {TERMINAL_SQL}",
                [held_s, held_s, *chunk, taken_at],
            )

    def _rewebhook(self, rewebhooked: list[tuple[str | None, str]]) -> None:
        """A re-submit's webhook (JSON text, or None: none), job id by job id: where each
        job's events go from now on, and its events not yet delivered (pending, or dead: a
        replay sends it there). An ended job's too: a failed or cancelled one that 'afc retry'
        runs again sends its events there, and a receiver that moved (README: a 301 names
        where, 'give the webhook that URL') had the events queued before the move replayed
        to the old URL, dead again, and a retried job's posted there: set on the jobs not
        ended only, nothing could send them to the receiver the manifest names. A delivered
        event keeps the URL it reached; a webhook removed leaves the queued events where
        they were (there is nowhere else to send them)."""
        # their rows this transaction's already (``_rewrite``)
        self.db.conn.executemany("UPDATE jobs SET webhook_json = ? WHERE id = ?", rewebhooked[:1])
        # tests freeze here: one job's row written, the others' not yet, in one transaction
        stall_point("rewebhooked_one")
        self.db.conn.executemany("UPDATE jobs SET webhook_json = ? WHERE id = ?", rewebhooked[1:])
        by_webhook: dict[str, list[str]] = {}
        for text, job_id in rewebhooked:
            if text is not None:
                by_webhook.setdefault(text, []).append(job_id)
        queued = []
        for chunk in _chunks([j for job_ids in by_webhook.values() for j in job_ids], IN_CHUNK):
            queued += [
                row[0]
                for row in self.db.execute(
                    "SELECT id FROM deliveries"
                    f" WHERE status IN ('pending', 'dead') AND job_id IN {_marks(chunk)}",
                    chunk,
                )
            ]
        self._lock_deliveries(queued)
        for text, job_ids in by_webhook.items():
            webhook = json.loads(text)
            for chunk in _chunks(job_ids, IN_CHUNK):
                # the (status, next_attempt_at) index: pending and dead events are few
                self.db.execute(
                    "UPDATE deliveries SET url = ?, secret_env = ?, timeout_s = ?"
                    f" WHERE status IN ('pending', 'dead') AND job_id IN {_marks(chunk)}",
                    [webhook["url"], webhook["secret_env"], webhook.get("timeout_s", 10.0)] + chunk,
                )

    def batch_needs(self, batch: str) -> dict[str, tuple[str, ...]]:
        """The needs of a batch's jobs as admitted: key -> need keys."""
        return admitted_needs(self.db, batch, "?")

    def _regate(
        self,
        batch: str,
        regate: Regate,
        change: Change | None,
        now: float,
        result: AdmitResult,
        regated: list[tuple[Regate, Change]] | None = None,
    ) -> None:
        """Write a replayed job's new review flag and needs, guarded by the status and the
        attempts it had when read: a job a run started meanwhile keeps its gates (said).

        ``regated``: where the change goes to be written after the admission's rounds, its
        row taken with the others' (``_rewrite``). Written as the rounds met them, in the
        manifest's order, the admission held one job's row and waited for the next's, which
        another writer of many of them held while it waited for the first: a deadlock,
        PostgreSQL failing one of the two. A run whose lease ran out, its name still on the
        job, may be only stalled (SIGSTOP, a paused VM) and wake: its renewal, every job it
        holds in one statement (the run stopped, exit 1); 'afc cancel --batch', holding the
        batch's free jobs a chunk at a time (``hold_for_cancel``: the submit refused)."""
        if change is None or (change.review is None and change.needs is None):
            return
        if regated is not None:
            regated.append((regate, change))
            return
        sets, params, detail = ["updated_at = ?"], [now], {}
        if change.review is not None:
            sets.append("review = ?")
            params.append(1 if change.review else 0)
            detail["review"] = change.review
        if change.needs is not None:
            status = (
                "blocked"
                if change.needs
                else ("queued" if regate.status == "blocked" else regate.status)
            )
            sets.append("status = ?")
            params.append(status)
            if status != regate.status:
                sets.append("waiting_reason = NULL")
            detail["needs"] = list(change.needs)
        # guarded by what was read: no attempt since, and no run has taken the job's lease
        cursor = self.db.execute(
            f"UPDATE jobs SET {', '.join(sets)} WHERE id = ? AND status = ? AND attempts = 0"
            + (" AND lease_owner IS NULL" if regate.owner is None else " AND lease_owner = ?"),
            (
                *params,
                regate.job_id,
                regate.status,
                *(() if regate.owner is None else (regate.owner,)),
            ),
        )
        if cursor.rowcount != 1:  # another host's run claimed it since it was read
            started = Regate(regate.job, regate.job_id, "running", 0, regate.review, regate.needs)
            for name in detail:
                result.gates_kept.append(gate_kept(started, name, None))
            return
        if change.needs is not None:
            from afc_cli.manifest import job_id_for

            self.db.execute("DELETE FROM job_needs WHERE job_id = ?", (regate.job_id,))
            if change.needs:
                self.db.conn.executemany(
                    "INSERT INTO job_needs (job_id, need_id, need_key) VALUES (?, ?, ?)",
                    [(regate.job_id, job_id_for(batch, need), need) for need in change.needs],
                )
        self._event(regate.job_id, batch, "gates_changed", **detail)
        result.gates_changed.append({"key": regate.key, **detail})
        # tests freeze here: one job's gates written, the admission's other writes not yet
        stall_point("regated_one")

    def _admit_chunk(
        self,
        batch: str,
        jobs: list[Any],
        existing: dict[str, tuple],
        rates: Any,
        now: float,
        result: AdmitResult,
        gates: Gates,
        rewebhooked: list[tuple[str | None, str]],
        refiled: list[tuple[str, list[dict[str, Any]]]],
        regated: list[tuple[Regate, Change]],
    ) -> None:
        """One round of ``admit``. ``rewebhooked``, ``refiled``, ``regated``: replayed jobs
        whose webhook changed, those not yet rendered whose manifest names input files, and
        replayed jobs' new gates, added to for ``_rewrite`` after the last round."""
        from afc_cli.manifest import same_request

        fresh = []
        conflicts: list[dict[str, Any]] = []
        done = []
        accept = gates.decided.add  # a job decided (admitted or replayed), per job: cheap
        lease_now = self.lease_clock()
        stored_needs = gates.stored
        for job in jobs:
            stored, status, job_id, webhook, review, tried, owner, expires, mono = existing.get(
                job.key, (None,) * 9
            )
            stored_body = stored_inputs = None
            if stored is not None and stored != job.request_hash:
                # only a changed hash needs the stored body: a body admitted before the rule
                # for defaults may still be this request, else its changes are named (and the
                # admitted input files the manifest names again with other content)
                stored_body, stored_inputs = self.db.execute(
                    "SELECT request_json, inputs_json FROM jobs WHERE id = ?", (job_id,)
                ).fetchone()
            if stored is None:
                needs = job.needs
                if not needs:
                    accept(job.key)
                    fresh.append(job)
                    continue
                cause = gates.fresh(job.key, needs, job)
                if cause is None:
                    fresh.append(job)
                elif cause is not HELD:
                    conflicts.append(refused_dependent(job, None, cause))
            elif same_request(stored, stored_body, job, gates.restates):
                if job.inputs and status not in RENDERED and any("path" in i for i in job.inputs):
                    refiled.append((job_id, job.inputs))
                if bool(review) != bool(job.review) or job.needs or job.key in stored_needs:
                    # the gates may differ: the manifest's apply to a job not yet rendered
                    regate = Regate(
                        job,
                        job_id,
                        status,
                        tried,
                        bool(review),
                        stored_needs.get(job.key, ()),
                        stored_hash=stored,
                        webhook=webhook,
                        held=lease_held(owner, expires, lease_now, mono),
                        owner=owner,
                    )
                    outcome = gates.replay(regate)
                    if outcome is HELD:
                        continue
                    self._regate(batch, regate, outcome, now, result, regated)
                else:
                    accept(job.key)
                result.replayed.append(job.key)
                if status == "succeeded":
                    done.append(job)
                if webhook != _dumps(job.webhook):
                    # where events go is not part of the request: the latest manifest says,
                    # for an ended job too (``_rewebhook``)
                    rewebhooked.append((_dumps(job.webhook), job_id))
            else:
                gates.refused_request(
                    Regate(job, job_id, status, tried, bool(review), stored_needs.get(job.key, ()))
                )
                if webhook != _dumps(job.webhook):
                    # where events go is not the request: a receiver moved in the edit that
                    # changed this job's prompt is its receiver too (its admitted request,
                    # still rendered, sent them to the URL the manifest no longer names)
                    rewebhooked.append((_dumps(job.webhook), job_id))
                if job.inputs and status not in RENDERED and any("path" in i for i in job.inputs):
                    # nor is a file's place: the admitted request reads a file moved in the
                    # same edit where the manifest names it (it failed INPUT_UNAVAILABLE
                    # where the conflict said the next run renders it)
                    refiled.append((job_id, job.inputs))
                conflicts.append(
                    {
                        "key": job.key,
                        "stored_hash": stored,
                        "new_hash": job.request_hash,
                        "changes": changes_since(stored_body, job.body),
                        "status": status,  # the admitted request's, as it stays
                        "inputs_changed": inputs_changed(stored_inputs, job.inputs),
                    }
                )
        self._insert_admitted(batch, fresh, conflicts, now, result, gates.restates)
        if done:
            self._record_replays_avoided(batch, done, rates, now)

    def _refile_inputs(self, jobs: list[tuple[str, list[dict[str, Any]]]]) -> list[tuple[str, str]]:
        """Where a replayed job's input files are read from is the manifest's to say, as where
        its events go is (``webhook_json``): the request hash covers a file's SHA-256, not its
        path, so a file moved (its manifest naming the new place) is the same request, and the
        job, not yet rendered, reads it there. Kept as admitted, its run read the old place,
        gone, and failed the job (INPUT_UNAVAILABLE: 'restore it, then afc retry') however
        often it was retried or re-submitted. Each file input whose SHA-256 is the admitted
        one takes the manifest's path; everything else stays as admitted. Returns the jobs
        whose inputs changed (their inputs as JSON text, id), for ``_rewrite`` to write."""
        moved = []
        for chunk in _chunks(jobs, IN_CHUNK):
            wanted = dict(chunk)
            stored = dict(
                self.db.execute(
                    f"SELECT id, inputs_json FROM jobs WHERE id IN {_marks(list(wanted))}",
                    list(wanted),
                ).fetchall()
            )
            for job_id, named in chunk:  # the manifest's order, as ``_rewebhook`` writes
                if job_id not in stored:
                    continue
                admitted = json.loads(stored[job_id] or "[]")
                if len(admitted) != len(named):
                    continue
                changed = False
                for old, new in zip(admitted, named, strict=True):
                    if (
                        "path" in old
                        and "path" in new
                        and old.get("sha256") == new.get("sha256")
                        and (old["path"], old.get("name")) != (new["path"], new.get("name"))
                    ):
                        old["path"], old["name"] = new["path"], new.get("name")
                        changed = True
                if changed:
                    moved.append((_dumps(admitted), job_id))
        return moved

    def _insert_admitted(
        self,
        batch: str,
        fresh: list[Any],
        conflicts: list[dict[str, Any]],
        now: float,
        result: AdmitResult,
        restates: dict[str, str] | None = None,
    ) -> None:
        """Write new jobs (rows, ``admitted`` events, needs) and the conflicts' events.

        ``restates``: the replayed jobs ``manifest.same_request`` found the same request as
        admitted by an earlier afc's body (hash now -> admitted hash). A new job's input of
        such a job records the admitted hash as the request whose output it sends
        (``inputs.read_inputs`` checks the need's row against it): recorded as the manifest
        hashes it now, a new job using the output of a replayed job whose own input job was
        restated (a ``fallback_on`` an earlier afc admitted in another order, two links up)
        failed INPUT_UNAVAILABLE, nothing sent, and so did the new key its message offered."""
        if not fresh and not conflicts:
            return
        ordered = sorted(fresh, key=_job_id)  # the table is clustered on the (random) id
        job_rows, events = [], []
        for j in ordered:
            digest = j.request_hash  # a PlainJob makes its hex once here (manifest.PlainJob)
            job_rows.append(
                (
                    j.job_id,
                    batch,
                    j.key,
                    j.index,
                    digest,
                    j.request_json or _dumps(j.body),  # the same text, made from shared parts
                    j.output_key,
                    _dumps(j.webhook),
                    "blocked" if j.needs else "queued",
                    now,
                    now,
                    1 if j.review else 0,
                    _dumps(_as_admitted(j.inputs, restates) or None),
                )
            )
            # _dumps({"hash": ...}) of a hex digest, written out; in job id order, as the
            # events' (job_id, id) index is
            events.append((j.job_id, batch, now, "admitted", f'{{"hash":"{digest}"}}'))
        self.db.conn.executemany(
            "INSERT INTO jobs (id, batch, key, seq, request_hash, request_json, output_key,"
            " webhook_json, status, step, created_at, updated_at, review, inputs_json)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'probe', ?, ?, ?, ?)"
            " ON CONFLICT (batch, key) DO NOTHING",
            job_rows,
        )
        # a refused edit of an admitted key is part of that job's story (``afc show KEY``:
        # why its new prompt was never rendered); a new job refused with its need has no row
        from afc_cli.manifest import job_id_for

        events.extend(
            (
                None if c["stored_hash"] is None else job_id_for(batch, c["key"]),
                batch,
                now,
                "conflict_refused",
                _dumps(c),
            )
            for c in conflicts
        )
        self.db.conn.executemany(
            "INSERT INTO events (job_id, batch, at, kind, detail_json) VALUES (?, ?, ?, ?, ?)",
            events,
        )
        self._admit_needs(batch, [j for j in fresh if j.needs])
        result.new.extend(j.key for j in fresh)
        result.conflicts.extend(conflicts)

    def _record_replays_avoided(self, batch: str, jobs: list[Any], rates: Any, now: float) -> None:
        """Count each job's avoided render once: a replay of a job already counted (by an
        earlier replay, or when a fresh ledger found its output) adds nothing, so a cron job
        replaying a finished batch every five minutes claims no new savings."""
        counted = {
            row[0]
            for row in self.db.execute("SELECT job_id FROM avoided WHERE batch = ?", (batch,))
        }
        jobs = [job for job in jobs if job.job_id not in counted]
        if not jobs:
            return
        renders: dict[str, tuple] = {}
        for row in self.db.execute(
            "SELECT a.job_id, a.provider, a.model, a.cost_micros, a.cost_source FROM attempts a"
            " JOIN jobs j ON j.id = a.job_id WHERE j.batch = ? AND a.status = 'succeeded'"
            " UNION ALL SELECT job_id, provider, model, cost_micros, cost_source FROM avoided"
            " WHERE batch = ? AND reason = 'stored'",
            (batch, batch),
        ):
            renders.setdefault(row[0], row[1:])
        from afc_cli.providers import images_requested, megapixels_requested

        rows = []
        for job in jobs:
            provider, model, cost, source = renders.get(job.job_id) or (
                job.chain[0]["provider"],
                job.chain[0]["model"],
                None,
                None,
            )
            if cost is None and provider is not None:
                # the card's price of the request: every image it asks for (as ``afc plan``)
                params = getattr(job, "params", None) or {}
                cost = rates.estimate(
                    provider,
                    model,
                    images_requested(provider, params),
                    megapixels_requested(provider, params),
                )
                source = "rate_card" if cost is not None else None
            rows.append((job.job_id, batch, now, "replay", provider, model, cost, source))
        self.db.conn.executemany(
            "INSERT INTO avoided (job_id, batch, at, reason, provider, model, cost_micros,"
            " cost_source) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )

    # --- reading ----------------------------------------------------------------------------

    def taken_from_here(self, job_id: str) -> bool:
        """Whether another process took this job's lease over from this one (its ``takeover``
        event names this process as the previous owner): a run that stalled past its lease
        and finds the job ended did not end it (``pipeline._run_job``). Read only; the job's
        few events, by the (job_id, id) index."""
        for (detail,) in self.db.execute(
            "SELECT detail_json FROM events WHERE job_id = ? AND kind = 'takeover'", (job_id,)
        ):
            try:
                if json.loads(detail or "{}").get("previous_owner") == self.owner:
                    return True
            except (ValueError, AttributeError):
                continue
        return False

    def job(self, job_id: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM jobs WHERE id = ?", (job_id,))

    def jobs_by_key(self, key: str, batch: str | None = None) -> list[dict[str, Any]]:
        if batch is None:
            # a look-up per batch in the (batch, key) index (_batch_scope): by key alone,
            # 'afc show KEY' read every job of the ledger (410,000 jobs: 2.5 s)
            every_batch, _ = _batch_scope(None)
            return self._all(
                f"SELECT * FROM jobs WHERE {every_batch} AND key = ? ORDER BY created_at", (key,)
            )
        return self._all("SELECT * FROM jobs WHERE key = ? AND batch = ?", (key, batch))

    def output_of(self, sha256: str) -> dict[str, Any] | None:
        """A job (its ``batch`` and ``key``) whose stored output has SHA-256 ``sha256``, else
        None: what a review decision's ``--sha256`` named when it is not its job's output."""
        return self._one(
            "SELECT batch, key FROM jobs WHERE output_sha256 = ? ORDER BY created_at LIMIT 1",
            (sha256,),
        )

    def renders_of(self, batch: str, key: str) -> int:
        """How many of a job's attempts rendered (succeeded): one, and a decision's
        ``--sha256`` that is not its output cannot name an earlier render of it."""
        row = self._one(
            "SELECT COUNT(*) AS n FROM attempts a JOIN jobs j ON j.id = a.job_id"
            " WHERE j.batch = ? AND j.key = ? AND a.status = 'succeeded'",
            (batch, key),
        )
        return int(row["n"]) if row else 0

    def unfinished_batches(self) -> list[str]:
        """The batches with a job a run may still take (queued, running, waiting or blocked).
        Each batch looked up in the (batch, status) index: by status alone, a worker's start
        read every job of the ledger (10-32 ms at 100,000 jobs on PostgreSQL, growing)."""
        rows = self.db.execute(
            "SELECT b.name FROM batches b WHERE EXISTS (SELECT 1 FROM jobs j"
            f" WHERE j.batch = b.name AND j.status IN {RUNNABLE_SQL}) ORDER BY b.name"
        )
        return [row[0] for row in rows]

    def batches_of(self, job_ids: list[str]) -> list[str]:
        found: set[str] = set()
        for chunk in _chunks(job_ids, IN_CHUNK):
            rows = self.db.execute(
                f"SELECT DISTINCT batch FROM jobs WHERE id IN {_marks(chunk)}", chunk
            )
            found.update(row[0] for row in rows)
        return sorted(found)

    def chains_of(self, job_ids: list[str]) -> list[tuple[str, list[dict[str, Any]]]]:
        """``(batch, chain)`` of each of the given jobs, as admitted (a chunk of ids a query:
        an ``afc resume`` read each job's row with a query of its own, 2.8 s of 100,000)."""
        chains: list[tuple[str, list[dict[str, Any]]]] = []
        for chunk in _chunks(job_ids, IN_CHUNK):
            rows = self.db.execute(
                f"SELECT batch, request_json FROM jobs WHERE id IN {_marks(chunk)}", chunk
            )
            chains.extend((batch, json.loads(request)["chain"]) for batch, request in rows)
        return chains

    def output_keys(self, batch: str, job_ids: list[str]) -> list[str]:
        """The output keys of the given jobs in one batch (for the storage pre-check).

        Found by id alone, the batch compared here: with ``batch = ?`` in the WHERE, a
        PostgreSQL planner whose statistics predate a large admission read every job of the
        batch through the (batch, status) index for each 64 ids (2 ms a call at 10,000 jobs)."""
        keys: list[str] = []
        for chunk in _chunks(job_ids, IN_CHUNK):
            rows = self.db.execute(
                f"SELECT batch, output_key FROM jobs WHERE id IN {_marks(chunk)}", chunk
            )
            keys.extend(row[1] for row in rows if row[0] == batch)
        return keys

    def shared_outputs(
        self, batches: list[str], name_of: Callable[[str], str] | None = None
    ) -> list[tuple[str, str]]:
        """``(job id, output key)`` of the unfinished jobs of ``batches`` (batches of one
        storage) whose output key another unfinished job of theirs has too: jobs a run must
        not render side by side (``run._note_outputs``). Usually none, found with one
        grouping of their unfinished jobs (through the (batch, status) index). ``name_of``:
        where the storage takes two keys for one name (``Storage.name_of``: a case-insensitive
        folder), keys are compared by their names, each job given its key's name; their
        unfinished jobs are read and grouped here, as SQL cannot fold them so."""
        where = f"batch IN {_marks(batches)} AND status IN {RUNNABLE_SQL}"
        if name_of is not None:
            named: dict[str, list[str]] = {}
            for job_id, key in self.db.execute(
                f"SELECT id, output_key FROM jobs WHERE {where}", batches
            ):
                named.setdefault(name_of(key), []).append(job_id)
            return [(job_id, name) for name, ids in named.items() if len(ids) > 1 for job_id in ids]
        rows = self.db.execute(
            f"SELECT id, output_key FROM jobs WHERE {where} AND output_key IN"
            f" (SELECT output_key FROM jobs WHERE {where} GROUP BY output_key"
            " HAVING COUNT(*) > 1)",
            [*batches, *batches],
        )
        return [(row[0], row[1]) for row in rows]

    def batch_jobs(
        self, batch: str, statuses: tuple[str, ...] | None = None
    ) -> list[dict[str, Any]]:
        """A batch's jobs, whole, in admission order; only those with one of ``statuses``
        (looked up in the (batch, status) index) when given."""
        if statuses is None:
            return self._all("SELECT * FROM jobs WHERE batch = ? ORDER BY seq", (batch,))
        return self._all(
            f"SELECT * FROM jobs WHERE batch = ? AND status IN {_marks(list(statuses))}"
            " ORDER BY seq",
            (batch, *statuses),
        )

    def cancelled_with_requests(self, batch: str) -> list[dict[str, Any]]:
        """A batch's cancelled jobs, whole, that have an attempt left with a provider's
        request id (``started`` or ``unknown``: a request that may still render): those whose
        cancel was interrupted before the provider was asked to stop them are among them
        (``ops.cancel``). Each cancelled job's attempts looked up by its id: as ``id IN`` a
        list of every such attempt of the ledger, SQLite read every attempt for it (1.3 s at
        3,000,000 attempts, 7 s from a cold page cache, on each ``afc cancel --batch``)."""
        return self._all(
            "SELECT * FROM jobs j WHERE batch = ? AND status = 'cancelled' AND EXISTS"
            " (SELECT 1 FROM attempts a WHERE a.job_id = j.id AND a.status IN ('started',"
            " 'unknown') AND a.provider_request_id IS NOT NULL) ORDER BY seq",
            (batch,),
        )

    def _runnable(self, batch: str | None, include_blocked: bool = True) -> list[tuple]:
        # blocked jobs too: a run settles them (settle_blocked) and runs those whose needs are met
        statuses = RUNNABLE_SQL if include_blocked else ACTIVE_SQL
        scope, params = _batch_scope(batch)
        sql = (
            f"SELECT id, key FROM jobs WHERE {scope} AND status IN {statuses}"
            f" ORDER BY batch{self.CODE_POINT}, seq"
        )
        return self.db.execute(sql, params).fetchall()

    def runnable_job_ids(
        self, batch: str | None = None, *, include_blocked: bool = True
    ) -> list[str]:
        return [job_id for job_id, _ in self._runnable(batch, include_blocked)]

    def runnable_job_keys(self, batch: str) -> dict[str, str]:
        """A batch's unfinished jobs (blocked ones too), key -> job id, in admission order."""
        return {key: job_id for job_id, key in self._runnable(batch)}

    def admitted_output_keys(self, batch: str) -> dict[str, str]:
        """A batch's job keys and the output key each was admitted with: the key a run
        stores to, whatever a manifest that changed the job (a conflict) names now."""
        sql = "SELECT key, output_key FROM jobs WHERE batch = ?"
        return dict(self.db.execute(sql, (batch,)).fetchall())

    def changed_job_keys(self, batch: str, jobs: Iterable[Any]) -> set[str]:
        """The keys of ``jobs`` (a manifest's) admitted to ``batch`` with another request: the
        conflicts its admission refuses (``manifest.same_request``, read only)."""
        from afc_cli.manifest import same_request

        hashes = dict(
            self.db.execute("SELECT key, request_hash FROM jobs WHERE batch = ?", (batch,))
        )
        other = [job for job in jobs if hashes.get(job.key) not in (None, job.request_hash)]
        changed = set()
        restates: dict[str, str] = {}  # manifest.same_request's, for the whole manifest
        # their admitted requests read IN_CHUNK at a time: a statement each was 3.7 s for an
        # edit of 20,000 jobs' defaults
        for chunk in _chunks(other, IN_CHUNK):
            keys = [job.key for job in chunk]
            bodies = dict(
                self.db.execute(
                    f"SELECT key, request_json FROM jobs WHERE batch = ? AND key IN {_marks(keys)}",
                    (batch, *keys),
                )
            )
            changed |= {
                job.key
                for job in chunk
                if not same_request(hashes[job.key], bodies[job.key], job, restates)
            }
        return changed

    def finished_job_keys(self, batch: str) -> set[str]:
        """The keys of a batch's jobs that no run renders again: ended, or awaiting review."""
        sql = f"SELECT key FROM jobs WHERE batch = ? AND status NOT IN {RUNNABLE_SQL}"
        return {key for (key,) in self.db.execute(sql, (batch,)).fetchall()}

    _STATUS_SQL = (
        "SELECT j.id, j.key, j.batch, j.status, j.step, j.output_key, j.error_code,"
        " j.error_class, j.error_message, j.waiting_reason, "
        + ANSWERED_SQL
        + ", "
        + JOB_COST_SQL
        + " FROM jobs j"
    )
    # The same, of the jobs a WHERE picks (of ``j``, the jobs table): those picked first, apart
    # (a MATERIALIZED CTE, planned alone), then their attempts looked up. Picked in one query
    # with the five look-ups a job in ``attempts``, on PostgreSQL while ``attempts`` was never
    # analyzed (345 attempts a job estimated), the look-ups' estimate made a parallel scan of
    # every job of the ledger look cheaper than the (batch, status) index, whose rows the
    # look-ups would then be made for in one process (the server divides a parallel plan's
    # per-row cost by its workers): 46 ms for a 100-job batch among 100,000 jobs, where the
    # index took 2 ms.
    _STATUS_PICKED_SQL = (
        "WITH j AS MATERIALIZED (SELECT j.id, j.key, j.batch, j.seq, j.status, j.step,"
        " j.output_key, j.error_code, j.error_class, j.error_message, j.waiting_reason,"
        " j.lease_owner, j.lease_expires, j.lease_mono, j.attempts FROM {jobs} WHERE {where}) "
        + _STATUS_SQL.removesuffix(" FROM jobs j")
        + " FROM j"
    )

    def status_rows(
        self, batch: str | None = None, statuses: tuple[str, ...] | None = None
    ) -> list[dict[str, Any]]:
        """Every job of ``batch`` (or of the ledger) as ``afc status`` shows it, or only those
        with one of ``statuses`` (looked up in the (batch, status) index)."""
        return [row for chunk in self.status_chunks(batch, statuses, whole=True) for row in chunk]

    def status_chunks(
        self,
        batch: str | None = None,
        statuses: tuple[str, ...] | None = None,
        *,
        whole: bool = False,
    ) -> Iterator[list[dict[str, Any]]]:
        """``status_rows``, a chunk at a time (``_stream``); ``whole``: in one chunk, read
        with the ledger's ordinary cursor (a run's summary, inside its pipeline on
        PostgreSQL, where a server-side cursor has no place)."""
        sql = self._STATUS_SQL
        params: list[Any] = []
        if statuses is not None:
            jobs, where = "jobs j", "j.batch = ?"
            if batch is None:
                # each batch's jobs of those statuses looked up in turn (CROSS JOIN: the
                # batches first, on SQLite): as ``_batch_scope``'s 'j.batch IN (SELECT name
                # FROM batches)', SQLite read every job of the ledger once a user's ANALYZE
                # had counted the rows of an average (batch, status), mostly a finished
                # status's (120,000 jobs: 0.98 s, against 0.26 s without statistics)
                jobs, where = "batches b CROSS JOIN jobs j", "j.batch = b.name"
            where += f" AND j.status IN {_marks(list(statuses))}"
            sql = self._STATUS_PICKED_SQL.format(jobs=jobs, where=where)
            params = [*([] if batch is None else [batch]), *statuses]
        elif batch is not None:
            sql = self._STATUS_PICKED_SQL.format(jobs="jobs j", where="j.batch = ?")
            params.append(batch)
        sql += f" ORDER BY j.batch{self.CODE_POINT}, j.seq"
        for chunk in [self._all(sql, params)] if whole else self._stream(sql, params):
            yield self.gone_calls(chunk)

    def status_counts(self, batch: str | None = None) -> list[tuple[str, str, int]]:
        """``(batch, status, count)`` of the jobs of ``batch`` (or of the ledger), counted in
        the (batch, status) index, in that order (code points) on both engines: PostgreSQL's
        grouping gave them in any order, and ``afc status --json``'s counts in another order
        than SQLite's."""
        scope, params = _batch_scope(batch)
        rows = self.db.execute(
            f"SELECT batch, status, COUNT(*) FROM jobs WHERE {scope} GROUP BY batch, status"
            f" ORDER BY batch{self.CODE_POINT}, status{self.CODE_POINT}",
            params,
        )
        return [(name, status, int(count)) for name, status, count in rows]

    def status_rows_of(self, job_ids: list[str]) -> list[dict[str, Any]]:
        """The jobs of ``job_ids`` as ``status_rows`` gives them, in the order of the ids."""
        found: dict[str, dict[str, Any]] = {}
        for chunk in _chunks(job_ids, IN_CHUNK):
            sql = self._STATUS_PICKED_SQL.format(jobs="jobs j", where=f"j.id IN {_marks(chunk)}")
            rows = self._all(sql, chunk)
            found.update((row["id"], row) for row in rows)
        return self.gone_calls([found[job_id] for job_id in job_ids if job_id in found])

    def gone_calls(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Rows of ``JOB_COST_SQL`` with the unpriced calls left ``started`` by a run that is
        gone (``owner.process_gone``: dead on this host, its lease run out, or its job freed)
        counted in ``unpriced_attempts``, as ``cost_groups`` counts them: the run that takes
        the job over marks them ``unknown``, possibly paid. A live run's call is in flight,
        with no cost yet, and is not counted."""
        now = None
        for row in rows:
            if not row.get("calls_started"):
                continue
            if now is None:
                now = self.lease_clock()
            if process_gone(row["calls_owner"], row["lease_expires"], now, row["lease_mono"]):
                row["unpriced_attempts"] = (row["unpriced_attempts"] or 0) + row["calls_started"]
        return rows

    def output_rows(self, batch: str | None = None) -> list[dict[str, Any]]:
        """Succeeded jobs with their stored output: where it is, what it is, what it cost, and
        the model that made it (the succeeded attempt's, else what storage metadata named)."""
        return [row for chunk in self.output_chunks(batch, whole=True) for row in chunk]

    def output_storages(self, batch: str | None = None) -> dict[str, str]:
        """The batches of ``output_rows`` (those with a succeeded job), each with its storage
        URL, found in the (batch, status) index."""
        sql = (
            "SELECT b.name, b.storage FROM batches b WHERE EXISTS (SELECT 1 FROM jobs j"
            " WHERE j.batch = b.name AND j.status = 'succeeded')"
        )
        params: list[Any] = []
        if batch is not None:
            sql += " AND b.name = ?"
            params.append(batch)
        return dict(self.db.execute(sql, params).fetchall())

    def output_chunks(
        self, batch: str | None = None, *, whole: bool = False
    ) -> Iterator[list[dict[str, Any]]]:
        """``output_rows``, a chunk at a time (``_stream``; ``whole``: as ``status_chunks``)."""
        sql = (
            "SELECT j.id, j.key, j.batch, j.output_key, j.output_size, j.output_sha256,"
            " j.request_json, b.storage, " + JOB_COST_SQL + ","
            " (SELECT a.provider || '/' || a.model FROM attempts a WHERE a.job_id = j.id"
            " AND a.status = 'succeeded' ORDER BY a.number DESC LIMIT 1) AS model"
            " FROM jobs j JOIN batches b ON b.name = j.batch WHERE j.status = 'succeeded'"
        )
        params: list[Any] = []
        if batch is not None:
            sql += " AND j.batch = ?"
            params.append(batch)
        sql += f" ORDER BY j.batch{self.CODE_POINT}, j.seq"
        for rows in [self._all(sql, params)] if whole else self._stream(sql, params):
            # an output found stored (no attempt of this ledger made it): the model its
            # metadata named, read from ``avoided`` for those jobs at once (a subquery per job
            # read the whole table for each: ``afc outputs`` of 5,000 outputs a fresh ledger
            # found took 3 s, growing with the square of their number)
            found = self._stored_models([row["id"] for row in rows if row["model"] is None])
            for row in rows:
                if row["model"] is None:
                    row["model"] = found.get(row["id"])
            yield self.gone_calls(rows)

    def steps(self, job_id: str) -> list[dict[str, Any]]:
        return self._all(
            "SELECT * FROM steps WHERE job_id = ? ORDER BY completed_at, CASE step"
            " WHEN 'probe' THEN 1 WHEN 'render' THEN 2 WHEN 'spool' THEN 3 WHEN 'store' THEN 4"
            " WHEN 'verify' THEN 5 ELSE 6 END",
            (job_id,),
        )

    def attempts(self, job_id: str) -> list[dict[str, Any]]:
        return self._all("SELECT * FROM attempts WHERE job_id = ? ORDER BY number", (job_id,))

    def events(self, job_id: str) -> list[dict[str, Any]]:
        return self._all("SELECT * FROM events WHERE job_id = ? ORDER BY id", (job_id,))

    # --- claiming -----------------------------------------------------------------------------

    def claim(self, job_id: str, lease_s: float) -> dict[str, Any] | None:
        """Take a job for this process, or None if it is terminal or another live run holds it.

        Taking over from a dead or expired owner marks that owner's attempts left ``started``
        as ``unknown``: possibly paid, unpriced, never deleted. A job leased to this host
        (``owner.host_lease``) is taken as this process's own (no takeover counted); one leased
        to another host only once that lease expired, as a takeover.
        """
        now = self.lease_clock()
        mono = time.monotonic() + lease_s  # the expiry for this host's processes (lease_held)
        with self.tx():
            # The usual case first, in one statement: a free job is simply taken (or one
            # this process holds already, as a worker's claimed jobs are: its lease renewed).
            # On PostgreSQL (CLAIM_LOCK) a row another process's transaction has locked is
            # skipped, never waited for here: this block may share a group transaction that
            # holds other jobs' rows (the slow path below waits, alone).
            taken = self._all(
                "UPDATE jobs SET lease_owner = ?, lease_expires = ?, lease_mono = ?, updated_at = ?"
                " WHERE id = (SELECT id FROM jobs WHERE id = ?"
                " AND (lease_owner IS NULL OR lease_owner = ?)"
                f" AND status NOT IN {TERMINAL_SQL}{self.CLAIM_LOCK}) RETURNING *",
                (self.owner, now + lease_s, mono, now, job_id, self.owner),
            )
            if taken:
                job = taken[0]
                if job["attempts"]:
                    self._mark_unknown(job_id, job["batch"], exclude_owner=self.owner)
                return job
            # Held by another run, ended, or being written by another process right now:
            # what follows may wait for that process's row lock, so it waits holding no other
            # row of this process (``_alone``): two runs claiming the same jobs in different
            # orders never deadlock. The wait is bounded (``_claimable``): a process whose
            # transaction never ends is taken to hold the job.
            self._alone()
            job = self._claimable(job_id)
            if job is None or job["status"] in TERMINAL:
                return None
            holder = job["lease_owner"]
            # this host's lease (``owner.host_lease``) is this process's to take, as its own:
            # no takeover; another host's (another machine's under this host id too),
            # expired, is a move between hosts like any other
            mine = holder == self.owner or is_spool_hold_of(holder, self.owner)
            free = mine or not lease_held(holder, job["lease_expires"], now, job["lease_mono"])
            if not free:
                return None
            if job["attempts"] and not self._attempts_free(job_id):
                # its holder's transaction is writing one of its started attempts this very
                # moment (a host stalled past its lease, woken, recording a provider's
                # answer): the holder lives, and marking that attempt unknown would wait for
                # it while holding the job's row, which its transaction writes next. A
                # deadlock, which PostgreSQL broke by failing one of the two: the worker
                # stopped, or the claim. Held as by a live run, as ``_claimable``'s
                return None
            cursor = self.db.execute(
                "UPDATE jobs SET lease_owner = ?, lease_expires = ?, lease_mono = ?, updated_at = ?,"
                " takeovers = takeovers + ? WHERE id = ?"
                + (" AND lease_owner IS NULL" if holder is None else " AND lease_owner = ?")
                + f" AND status NOT IN {TERMINAL_SQL}",
                (
                    self.owner,
                    now + lease_s,
                    mono,
                    now,
                    0 if holder is None or mine else 1,
                    job_id,
                    *(() if holder is None else (holder,)),
                ),
            )
            if cursor.rowcount != 1:
                return None
            if job["attempts"]:
                self._mark_unknown(job_id, job["batch"], exclude_owner=self.owner)
            job.update(
                lease_owner=self.owner, lease_expires=now + lease_s, lease_mono=mono, updated_at=now
            )
            if holder is not None and not mine:
                self._event(job_id, job["batch"], "takeover", previous_owner=holder)
                job["takeovers"] += 1
                if job["takeovers"] > MAX_TAKEOVERS:
                    # The runs working on it keep dying (a crash loop): stop retrying it on
                    # our own and leave it for a person, with its whole history.
                    self.finish(
                        job,
                        "dead",
                        step=job["step"],
                        error_code="CRASH_LOOP",
                        error_message=f"the run working on this job ended without finishing "
                        f"it {plural(job['takeovers'], 'time')}; see its events and attempts (afc show "
                        f"{job['key']}), fix the cause, then 'afc retry {job['key']}'",
                    )
                    return None
            return job

    def _attempts_free(self, job_id: str) -> bool:
        """Whether the job's ``started`` attempts, which a takeover marks ``unknown``, can be
        written without waiting for another process's transaction (an engine with row locks;
        SQLite's write lock serialises writers already: True)."""
        return True

    def _lock_together(self, job_ids: list[str]) -> None:
        """Lock the rows of ``job_ids`` for this transaction, all of them or, while another
        transaction holds one, none: a change a person makes to many jobs at once (a
        re-submit's new webhook) waits holding no row a run may want next. SQLite's write
        lock serialises writers already: nothing to do."""

    def _claimable(self, job_id: str) -> dict[str, Any] | None:
        """``claim``'s read of a job it could not simply take, the row then this transaction's
        to change: None when the job is gone, or (an engine with row locks) when another
        process's transaction holds its row longer than a moment. SQLite's write lock
        serialises writers already: the job as it is."""
        return self.job(job_id)

    # Appended to a text column a listing or a run is ordered by (a batch name, a need's
    # key): its characters in code point order, as SQLite's default BINARY collation (and
    # Python's ``sorted``) order them. PostgreSQL orders text by the database's collation,
    # which on a database made with en_US.UTF-8 (most servers' and managed services' default)
    # puts 'alpha' before 'Zeta' and skips '-' and '_': the same ledger's jobs, outputs,
    # review queue and needs were listed in another order on each engine, and moved by
    # ``afc ledger copy``; and runs and workers took the batches in another order, so a
    # budget that ran out paid for another batch's jobs first.
    CODE_POINT = ""
    # Appended to the claim's SELECT where the engine locks rows: PostgreSQL's FOR UPDATE SKIP
    # LOCKED lets workers on many hosts pick different jobs without queuing on the same rows
    # (SQLite serialises writers on its write lock: nothing to skip there).
    CLAIM_LOCK = ""
    # Appended to a SELECT of one row that the transaction goes on to change, where the engine
    # locks rows (PostgreSQL's FOR UPDATE): nobody changes it between the read and the write.
    # SQLite's write lock serialises writers already.
    ROW_LOCK = ""

    @staticmethod
    def _none_of(column: str, values: Collection[str]) -> tuple[str, list[Any]]:
        """A condition that ``column`` is none of ``values`` (at least one), and its
        parameters; PostgreSQL's passes them as one array (``PostgresLedger._none_of``)."""
        return f"{column} NOT IN ({', '.join('?' * len(values))})", list(values)

    @staticmethod
    def _any_of(column: str, values: Collection[str]) -> tuple[str, list[Any]]:
        """A condition that ``column`` is one of ``values`` (at least one), and its
        parameters; PostgreSQL's passes them as one array (``PostgresLedger._any_of``)."""
        return f"{column} IN {_marks(list(values))}", list(values)

    def claim_runnable(
        self,
        limit: int,
        lease_s: float,
        batch: str | None = None,
        skip: Collection[str] = (),
        settle: bool = True,
    ) -> list[dict[str, Any]]:
        """Claim up to ``limit`` runnable jobs (queued, running or waiting; free, or leased by
        an owner whose lease expired by the ledger's clock, or who died on this host), in the
        order they were admitted, for ``afc worker``. One transaction.

        Free jobs are taken in one statement: an ``UPDATE`` of the ids a ``MATERIALIZED`` CTE
        selected (and, on PostgreSQL, locked, skipping rows another worker's claim holds): the
        CTE runs once, so no claim takes more than ``limit`` rows (a bare ``IN (... LIMIT n)``
        subquery may be run again and take more); the CTE reads the first entries of m017's
        index ``jobs_claim_order``, the free runnable jobs in this order (its WHERE is the
        index's, word for word, as SQLite needs). Only if that leaves
        room are leases of other owners looked at: each is taken by ``claim``, which
        re-checks it, counts a takeover and marks the previous owner's attempts in flight
        ``unknown`` in this same transaction.

        ``skip``: ids of jobs this process is running still (a worker's run loop), never
        claimed here, free or not (``run._fed`` says why); nor are the jobs it paused
        (``pause_claims``).

        ``settle``: settle the blocked jobs whose needs have ended first
        (``settle_ready_blocked``), a look at every blocked job; ``afc worker`` looks on its
        own schedule instead (``worker.Settle``) and passes False."""
        if settle:
            self.settle_ready_blocked(batch)
        now = self.lease_clock()
        # the batch named in code point order, as the partial indexes hold it (``_claim_scope``)
        where, params = _claim_scope(batch, f"status IN {ACTIVE_SQL}", f"batch{self.CODE_POINT}")
        skip = set(skip) | self._paused_ids()
        if skip:
            none_of, more = self._none_of("id", skip)
            where += f" AND {none_of}"
            params += more
        with self.tx():
            # A transaction of its own, holding no other job's row and committed at its end
            # (``_alone``): on PostgreSQL, FOR UPDATE SKIP LOCKED skips the rows locked when
            # it reaches them, but a row another worker claimed and committed while this
            # statement ran (free in its snapshot) is locked, re-checked, found taken and
            # skipped still locked until this transaction ends. In a group transaction that
            # lock would outlive the claim by milliseconds while the owner's next write of
            # its job (start_attempt, finish, release) waits for it, and this group's write
            # of one of its own jobs may wait for a lock the other's claim left the same way:
            # a deadlock.
            self._alone()
            # First the jobs of runs that died on this host: a render such a run spooled but
            # did not store is in this host's spool alone, and another host would pay for it
            # again once the lease runs out (README: "Where a dead host's bytes are"). Looked
            # for at a worker's first claim and then every HERE_CHECK_S (a process on this
            # host dies seldom; the look reads every job this host's processes hold).
            adopted = []
            if time.monotonic() >= self._here_checked + HERE_CHECK_S:
                self._here_checked = time.monotonic()
                adopted = self._claim_held(limit, lease_s, where, params, now, here_only=True)
            taken = self._all(
                "WITH c AS MATERIALIZED (SELECT id FROM jobs"
                f" WHERE {where} AND lease_owner IS NULL"
                f" ORDER BY batch{self.CODE_POINT}, seq LIMIT ?{self.CLAIM_LOCK})"
                " UPDATE jobs SET lease_owner = ?, lease_expires = ?, lease_mono = ?, updated_at = ?"
                " WHERE id IN (SELECT id FROM c) RETURNING *",
                [
                    *params,
                    limit - len(adopted),
                    self.owner,
                    now + lease_s,
                    time.monotonic() + lease_s,
                    now,
                ],
            )
            taken.sort(key=lambda job: (job["batch"], job["seq"]))
            for job in taken:
                if job["attempts"]:  # a released job: nothing of it may still be ``started``
                    self._mark_unknown(job["id"], job["batch"], exclude_owner=self.owner)
            taken = adopted + taken
            if len(taken) < limit:
                taken += self._claim_held(limit - len(taken), lease_s, where, params, now)
        return taken

    def _claim_held(
        self,
        limit: int,
        lease_s: float,
        where: str,
        params: list[Any],
        now: float,
        here_only: bool = False,
    ) -> list[dict[str, Any]]:
        """``claim_runnable``'s takeovers: jobs whose lease expired by the ledger's clock, and
        those of runs that died on this host (owner.owner_is_dead; ``here_only``: those
        alone), taken one by one."""
        rows = []
        if not here_only:
            rows = self._all(
                f"SELECT id FROM jobs WHERE {where} AND lease_owner IS NOT NULL"
                " AND lease_expires < ?"
                f" ORDER BY batch{self.CODE_POINT}, seq LIMIT ?{self.CLAIM_LOCK}",
                [*params, now, limit],
            )
        if len(rows) < limit:
            # Every job an owner on this host holds is looked at (other live workers' too:
            # a LIMIT before the dead are picked out would stop at theirs), unlocked: ``claim``
            # re-checks each it takes. ``here_only`` takes them whether or not their lease
            # ran out (a worker back after a slow restart comes before any other host).
            # (this host's owners by their prefix, compared as it is: a LIKE pattern read a
            # backslash in the host id as an escape on PostgreSQL, and found none of them)
            here_prefix = host_of(self.owner) + ":"
            here = self._all(
                f"SELECT id, lease_owner, lease_mono FROM jobs WHERE {where}"
                " AND lease_owner IS NOT NULL AND substr(lease_owner, 1, ?) = ?"
                " AND lease_owner <> ?"
                + ("" if here_only else " AND lease_expires >= ?")
                + f" ORDER BY batch{self.CODE_POINT}, seq",
                [
                    *params,
                    len(here_prefix),
                    here_prefix,
                    self.owner,
                    *(() if here_only else (now,)),
                ],
            )
            # a host lease whose ``lease_mono`` is still ahead is a pause every process here
            # keeps (``set_waiting``'s ``paused_s``: storage work that just gave up), where
            # a pause kept by the process alone (``pause_claims``) let this host's other
            # workers try the job again at once, each try spending one of its requeues (never
            # past the lease: an expired one is taken above, whatever its ``lease_mono``)
            rows += [
                row
                for row in here
                if owner_is_dead(row["lease_owner"])
                and not (
                    is_host_lease(row["lease_owner"])
                    and (row["lease_mono"] or float("-inf")) > time.monotonic()
                )
            ]
        taken = []
        for row in rows[:limit]:
            job = self.claim(row["id"], lease_s)
            if job is not None:
                taken.append(job)
        return taken

    def _alone(self) -> None:
        """Called by a block before a write that may wait for another process's row lock (a
        job another run may be claiming or settling). An engine whose run loop shares one
        transaction among many jobs' blocks (PostgreSQL's group commit) commits the others'
        changes first and this block at its end, so the wait holds no other row: waits form
        no cycle. SQLite has one writer at a time and no row locks: nothing to do."""

    def _hold_walk(self, batches: Collection[str], *, shared: bool = False) -> None:
        """First in a transaction that walks the jobs behind a decided job (``_fail_dependents``,
        ``_reblock_dependents``), before it locks any job's row: such walks of a batch run one
        at a time. A walk locks a level's jobs by id, then the next level's: two at once, on
        gates whose jobs are shared (a title card needing two frames, an edit needing one of
        them and the title card), met a job at the first level of one and the second of the
        other, and locked them in opposite orders: a deadlock that failed one decision. A
        re-submit of a batch takes it too (``admit``), ``shared``: re-submits still run beside
        each other, never beside a walk of their batch. Held per batch (``batches``: those of
        the decided jobs), as a job's needs are jobs of its batch, so two batches' walks never
        meet: held for the whole ledger, a re-submit giving 10,000 shots of one batch a new
        need (about 9 s) held every 'afc retry', 'afc cancel' and rejection of every other
        batch as long, without a word. SQLite's write lock already serialises; PostgreSQL
        takes an advisory lock a batch."""

    def _mark_unknown(
        self,
        job_id: str,
        batch: str,
        exclude_owner: str | None,
        only_owner: str | None = None,
        *,
        own: bool = False,
    ) -> int:
        """Attempts a run left ``started`` become ``unknown`` (possibly paid) with the class
        ``interrupted``: they are kept and counted as spend of unknown cost, but never use up
        a model's attempts (attempts.py). ``only_owner``: that run's attempts alone. ``own``:
        the run marks those it abandons as it ends (``release_all``): one of its own whose cost
        was known (a paid render whose output it was fetching) is in that run's summary and
        budget, and stays that run's when a later run fetches it (``attempt_left_polling``
        with ``priced``, as ``interrupt_attempt`` writes; ``reopen_attempt``). Returns how
        many."""
        sql = (
            "SELECT number, provider, owner, cost_micros FROM attempts WHERE job_id = ?"
            " AND status = 'started'"
        )
        params: tuple = (job_id,)
        if exclude_owner is not None:
            sql += " AND (owner IS NULL OR owner <> ?)"
            params = (*params, exclude_owner)
        if only_owner is not None:
            sql += " AND owner = ?"
            params = (*params, only_owner)
        rows = self._all(sql, params)
        for row in rows:
            self.db.execute(
                "UPDATE attempts SET status = 'unknown', error_class = 'interrupted', ended_at = ?,"
                " error_message = ? WHERE job_id = ? AND number = ? AND status = 'started'",
                (self.clock(), INTERRUPTED_MESSAGE, job_id, row["number"]),
            )
            self._event(
                job_id, batch, "attempt_unknown", number=row["number"], provider=row["provider"]
            )
            if own and row["owner"] == self.owner and row["cost_micros"] is not None:
                self._event(
                    job_id, batch, "attempt_left_polling", number=row["number"], priced=True
                )
        return len(rows)

    def renew_leases(self, lease_s: float, *, stale: bool = False) -> int:
        """Renew the leases of every job this run holds; returns how many it could not renew
        now (an engine with row locks: another transaction holds their rows), which
        ``run._renew`` tries again soon, ``stale``: those not renewed in the last third of a
        lease. SQLite's write lock serialises writers: all, every time."""
        # this run's jobs found in m024's partial index ``jobs_lease_owner``: before it, each
        # renewal scanned every job of the ledger under its write lock (1.1 s at 1,000,000)
        with self.tx():
            self._write_lease("lease_owner = ?", (self.owner,), lease_s)
        return 0

    def not_held(self, job_ids: list[str]) -> set[str]:
        """Of ``job_ids`` (this run's), the ones it no longer holds: ended by another process
        (a person's cancel), taken over, or gone from the ledger (``pipeline._ended_elsewhere``,
        of many jobs at once). Read, not written: ``RunContext.wake_lost``, every few seconds
        while jobs rest, on the run's loop: 10,000 of them, about 20 ms a look on SQLite (a
        2-core machine; 25-35 ms with ``_all``'s dicts, 100-400 ms with the suite beside)."""
        held: set[str] = set()
        for chunk in _chunks(job_ids, IN_CHUNK):
            cursor = self.db.execute(
                f"SELECT id FROM jobs WHERE id IN {_marks(chunk)} AND lease_owner = ?"
                f" AND status NOT IN {TERMINAL_SQL}",
                (*chunk, self.owner),
            )
            held.update(row[0] for row in cursor.fetchall())
        return set(job_ids) - held

    def keep_lease(self, job_id: str, lease_s: float) -> bool:
        """Renew this process's lease of one job, if it still holds it and the job is not
        finished: True then, False when another process took the job over (its lease had
        run out), or it ended. One conditional write: a takeover (``claim``) changes the
        row only where its holder is still the one it read, so after True no other process
        takes the job over before the new lease runs out (afc_cli/pipeline.py
        ``_last_look``). Committed before this returns (``commit=True``): the request that
        follows leaves with the renewal visible to every other process."""
        with self.tx(commit=True):
            return (
                self._write_lease("id = ? AND lease_owner = ?", (job_id, self.owner), lease_s) == 1
            )

    def _write_lease(self, where: str, params: tuple, lease_s: float) -> int:
        """Renew the leases of this process's jobs that ``where`` selects (not ended); returns
        how many. The expiry is reckoned as the statement is sent, but the statement may wait
        for a row another transaction holds (on PostgreSQL a re-submit writing the batch's
        webhooks or gates, up to ``LOCK_WAIT_S`` while it waits on a stalled holder of its own;
        on SQLite the write lock, up to its busy timeout): a wait longer than the lease wrote a
        lease already run out, and another host took the job over at once and paid for it
        again while this run's call was in flight. Written again once it waited: the rows are
        this transaction's by then, so the second write waits for nobody. Those rows, by
        their ids: ``where`` again found none of them where it selects stale leases
        (``PostgresLedger.renew_leases``'s tries), which the first write had made fresh."""
        started = awake_clock()
        written = [
            row[0]
            for row in self.db.execute(
                f"UPDATE jobs SET lease_expires = ?, lease_mono = ? WHERE {where}"
                f" AND status NOT IN {TERMINAL_SQL} RETURNING id",
                (self.lease_clock() + lease_s, time.monotonic() + lease_s, *params),
            ).fetchall()
        ]
        if awake_clock() - started >= LEASE_WAIT_REWRITE_S:
            for chunk in _chunks(written, IN_CHUNK):
                self.db.execute(
                    "UPDATE jobs SET lease_expires = ?, lease_mono = ?"
                    f" WHERE id IN {_marks(chunk)} AND lease_owner = ?",
                    (self.lease_clock() + lease_s, time.monotonic() + lease_s, *chunk, self.owner),
                )
        return len(written)

    def release_all(self) -> int:
        """At the end of an interrupted run: the attempts still in flight (abandoned) become
        unknown, our leases are freed (a job whose output is in this host's spool goes to this
        host: ``release``). Returns how many attempts were abandoned."""
        abandoned = 0
        with self.tx():
            spooled = []
            for row in self._all("SELECT id, batch FROM jobs WHERE lease_owner = ?", (self.owner,)):
                abandoned += self._mark_unknown(
                    row["id"], row["batch"], exclude_owner=None, own=True
                )
                self._event(row["id"], row["batch"], "released", reason="interrupted")
                if self._spooled_here(row["id"]):
                    spooled.append(row["id"])
            # a call of ours whose job no longer names us (cancelled while it rendered: the
            # cancel left the call to this run, which now abandons it) is ours to mark too
            for row in self._all(
                "SELECT DISTINCT a.job_id, j.batch FROM attempts a JOIN jobs j ON j.id = a.job_id"
                " WHERE a.owner = ? AND a.status = 'started'"
                " AND (j.lease_owner IS NULL OR j.lease_owner <> ?)",
                (self.owner, self.owner),
            ):
                abandoned += self._mark_unknown(
                    row["job_id"], row["batch"], exclude_owner=None, only_owner=self.owner, own=True
                )
            for job_id in spooled:  # to this host, not to any (``release``)
                self._give_back(job_id, here=True)
            self.db.execute(
                "UPDATE jobs SET lease_owner = NULL, lease_expires = NULL,"
                " status = CASE WHEN status = 'running' THEN 'queued' ELSE status END"
                f" WHERE lease_owner = ? AND status NOT IN {TERMINAL_SQL}",
                (self.owner,),
            )
        return abandoned

    def note(self, job: dict[str, Any], kind: str, **detail: Any) -> None:
        """Append an event to a job's log, whatever its state."""
        with self.tx():
            self._event(job["id"], job["batch"], kind, **detail)

    def cancel(self, job: dict[str, Any], reason: str, *, dependents: bool = True) -> bool:
        """Cancel a job: final, through the same first-terminal-wins update as any ending. The
        blocked jobs that need it fail with it (DEPENDENCY_FAILED) in the same transaction, as
        a rejection's do: ``afc status`` and ``queue stats`` show them failed at once, not when
        a run next looks. ``dependents=False`` leaves them to ``fail_dependents``, for a
        cancel of several jobs that may include them (they are cancelled, not failed).

        An attempt the job has ``started`` that belongs to no live run (its owner's lease
        expired by the ledger's clock, or its process died on this host: the rule a takeover
        follows, ``claim``) becomes ``unknown`` in the same transaction, as a takeover would
        have marked it: no run takes a cancelled job over, so it would otherwise stay
        ``started``, possibly paid, for ever. A live run's call is left to that run, which
        records its answer (and cost) when it comes."""
        with self.tx():
            self._alone()  # the lock below may wait for a run's write of this job
            self.hold_unmoved()
            if dependents:
                self._hold_walk([job["batch"]])
            held = self._one(
                "SELECT lease_owner, lease_expires, lease_mono, step FROM jobs"
                f" WHERE id = ?{self.ROW_LOCK}",
                (job["id"],),
            )
            # the step the job has now, not the one ``job`` was read at: 'afc cancel --batch B'
            # reads its targets, then cancels them one by one (20,000: 10 to 40 s), and a run
            # takes them on meanwhile; a job it had rendered, spooled and stored was set back
            # to its render step ('afc show': "not stored yet (its store step is not done)")
            cancelled = self.finish(
                job,
                "cancelled",
                step=held["step"] if held else job["step"],
                error_code="CANCELLED",
                error_message=reason,
            )
            if cancelled:
                holder = held["lease_owner"] if held else None
                # (held by this cancel itself, ``hold_for_cancel``: live, with no call of its
                # own to leave alone; the calls of runs gone are marked all the same)
                # (or whose transaction is writing one of its attempts this very moment,
                # ``_attempts_free``: a host stalled past its lease, woken; marking that
                # attempt would wait for it, holding the job's row it writes next, a
                # deadlock that failed the cancel or stopped that run)
                live = held is not None and (
                    lease_held(
                        holder, held["lease_expires"], self.lease_clock(), held["lease_mono"]
                    )
                    or not self._attempts_free(job["id"])
                )
                self._mark_unknown(job["id"], job["batch"], exclude_owner=holder if live else None)
                if live:
                    # the live run's call goes on (a synchronous provider's cannot be
                    # stopped): it keeps counting toward its provider's shared concurrency
                    # limit (``_check_limit``) until that run records it, or its lease as of
                    # the cancel runs out (the run died), as any call of a job held does
                    self.db.execute(
                        "UPDATE jobs SET lease_expires = ? WHERE id = ?",
                        (held["lease_expires"], job["id"]),
                    )
                if dependents:
                    self._fail_dependents(job["id"], job["batch"])
        return cancelled

    def hold_for_cancel(self, job_ids: list[str], lease_s: float) -> int:
        """Lease the free jobs among ``job_ids`` (queued, waiting or blocked, leased to no
        one) to this process, in one transaction, before 'afc cancel --batch B' cancels them
        one by one (``cancel``: a transaction each, 20,000 in 10 to 40 s). Meanwhile a run or
        a worker claimed the jobs just ahead of the cancel and paid for their renders (978
        of 20,000 beside an instant resume, 599 beside a worker): a job held here is another
        live process's, which no claim takes. A cancel cut short frees what it still holds
        (``release_held``); one killed leaves them to expire (this host's runs take them at
        once, its process gone). Returns how many it holds."""
        now = self.lease_clock()
        mono = time.monotonic() + lease_s  # this host's processes compare it (lease_held)
        held = 0
        with self.tx():
            for chunk in _chunks(job_ids, IN_CHUNK):
                cursor = self.db.execute(
                    "UPDATE jobs SET lease_owner = ?, lease_expires = ?, lease_mono = ?"
                    f" WHERE id IN {_marks(chunk)} AND lease_owner IS NULL"
                    " AND status IN ('queued', 'waiting', 'blocked')",
                    (self.owner, now + lease_s, mono, *chunk),
                )
                held += cursor.rowcount
                # tests freeze here: a chunk's jobs held, the next chunk's not yet
                stall_point("held_chunk")
        return held

    def release_held(self, job_ids: list[str]) -> None:
        """Free the leases this process holds on those of ``job_ids`` that have not ended
        (``hold_for_cancel`` of a cancel cut short): they run again as before. By id, as
        they were held: ``lease_owner`` alone has no index, and every job of the ledger
        was read."""
        with self.tx():
            for chunk in _chunks(job_ids, IN_CHUNK):
                self.db.execute(
                    "UPDATE jobs SET lease_owner = NULL, lease_expires = NULL, lease_mono = NULL"
                    f" WHERE id IN {_marks(chunk)} AND lease_owner = ?"
                    f" AND status NOT IN {TERMINAL_SQL}",
                    (*chunk, self.owner),
                )

    def fail_dependents(self, job_id: str, batch: str) -> int:
        """Fail the blocked jobs that wait, directly or not, for a job (of ``batch``) that
        ended badly; returns how many it failed (``afc cancel`` says so)."""
        with self.tx():
            return self._fail_dependents(job_id, batch)

    def status_pairs(self) -> dict[tuple[str, str], tuple[int, float | None]]:
        """Each batch's jobs by status, ``(batch, status) -> (count, oldest created_at)``,
        from one read of the (batch, status, created_at) index, grouped in its order (no sort
        of every job's status: on 100,000 jobs a third of the time). ``afc queue stats``
        looks up only the batches these name (``queue_stats``, ``held_jobs``,
        ``failed_dependents``): each figure looked up in every batch ever admitted was seven
        statements a batch (7,017 at 1,000 batches, about 2 s a look)."""
        return {
            (name, status): (int(count), oldest)
            for name, status, count, oldest in self.db.execute(
                "SELECT batch, status, COUNT(*), MIN(created_at) FROM jobs GROUP BY batch, status"
            )
        }

    def queue_stats(
        self,
        now: float | None = None,
        pairs: dict[tuple[str, str], tuple[int, float | None]] | None = None,
    ) -> dict[str, Any]:
        """Backlog figures for alerting: queued, in flight, delayed, dead-lettered, failed
        (both wait for a person: ``afc retry``), and the age of the oldest unfinished job,
        on the ledger's clock (``clock``), the one admissions and reviews are dated by: on a
        shared PostgreSQL ledger, a host whose clock was 20 minutes behind the one asking
        dated its jobs 20 minutes old as they were admitted. ``pairs``: ``status_pairs``,
        read by the caller for its own look-ups too."""
        now = self.clock() if now is None else now
        pairs = self.status_pairs() if pairs is None else pairs
        counts: dict[str, int] = {}
        for (_batch, status), (count, _oldest) in pairs.items():
            counts[status] = counts.get(status, 0) + count
        # the oldest active job, from the same read (m008's index holds created_at)
        oldest = min(
            (
                age
                for (_, status), (_, age) in pairs.items()
                if status in ACTIVE and age is not None
            ),
            default=None,
        )
        return {
            "queued": counts.get("queued", 0),
            "in_flight": counts.get("running", 0),
            "delayed": counts.get("waiting", 0),
            "dlq": counts.get("dead", 0),
            "failed": counts.get("failed", 0),
            # at least 0: a job admitted before the clock was set back is dated ahead of it,
            # and a negative age is one no --fail-if 'oldest_age_seconds>N' alert fires on
            "oldest_age_seconds": 0 if oldest is None else max(0, int(now - oldest)),
            **self._review_stats(counts, now, batches_with(pairs, "awaiting_review")),
        }

    def _jobs_in(
        self, columns: str, condition: str, batches: Collection[str] | None
    ) -> list[dict[str, Any]]:
        """``columns`` of the jobs of ``batches`` (every batch when None) that meet
        ``condition``, looked up in the (batch, status) index, IN_CHUNK batches a statement."""
        names = self._batch_names() if batches is None else list(batches)
        return [
            row
            for chunk in _chunks(names, IN_CHUNK)
            for row in self._all(
                f"SELECT {columns} FROM jobs WHERE batch IN {_marks(chunk)} AND {condition}",
                chunk,
            )
        ]

    def held_jobs(self, batches: Collection[str] | None = None) -> list[dict[str, Any]]:
        """The status and lease of every running or waiting job (``afc queue stats`` tells
        those whose process is gone from those in flight); of ``batches`` alone when given
        (those ``status_pairs`` says have such jobs)."""
        return self._jobs_in(
            "status, lease_owner, lease_expires, lease_mono",
            "status IN ('running', 'waiting')",
            batches,
        )

    def failed_dependents(self, batches: Collection[str] | None = None) -> list[dict[str, Any]]:
        """The jobs failed ``DEPENDENCY_FAILED`` (``afc queue stats`` tells those that follow
        a person's decision, ``run.follow_decisions``); of ``batches`` alone when given."""
        return self._jobs_in(
            "id, status, error_code",
            "status = 'failed' AND error_code = 'DEPENDENCY_FAILED'",
            batches,
        )

    def _batch_names(self) -> list[str]:
        return [row[0] for row in self.db.execute("SELECT name FROM batches")]

    def retry(
        self,
        job: dict[str, Any],
        by: str,
        lease_s: float = 300.0,
        *,
        spooled_here: bool = False,
        dependents: bool = True,
    ) -> list[str]:
        """Put a failed, dead-lettered or cancelled job back to ``queued``: a person's decision.

        Its key, request hash and whole history stay; the attempts so far stop counting toward
        its chain (``attempt_base``), and it starts again at the probe, so an output it already
        stored (or a spool file it left) is used before anything is paid for. One dead-lettered
        ``STORE_FAILED`` at its store step (or its verify step: its upload taken, the object
        not read back) has its paid render in the spool of the host that
        rendered it alone: it starts again at that step, leased to that host for ``lease_s``
        (``owner.host_lease``, as a job waiting to store is), so a worker there stores it and
        one elsewhere, without the file, renders nothing (``SPOOL_MISSING``, naming the host);
        from the probe, a worker on another host took it and paid for the render again. So does
        one cancelled at its store step (a person's ``afc cancel`` while its upload kept
        failing): nothing stored its spooled render, as a late result's is. One whose last
        attempt succeeded after it ended (a late result, in that host's spool alone when the
        storage refused it), cancelled, or retried and then dead-lettered STORE_FAILED at
        its probe (``LATE_SPOOLED_SQL``), starts again at the probe leased to that host: from
        the probe free for any host, a worker elsewhere paid for the render again. A last attempt
        left polling at a job-style provider (``unknown``, its request id recorded and not
        found gone: a job dead-lettered by takeovers while it polled) stays after the base, so
        the next run polls that request rather than pay for a new one (one still ``started``
        too: a run killed while it fetched the answered request's output, which the next run's
        claim marks ``unknown``); for a cancelled job only while that request is left to be
        polled (``_cancel_left_polling``), not once the cancel asked the provider to stop it.
        So does one a stopped run left at a synchronous provider's output URL (``answer_url``,
        ``record_answer_url``), a cancelled job's too: the next run fetches it while the
        provider keeps it (``pipeline._resumable``), where it paid for a new render.
        ``spooled_here``: a spool file of
        the job is in the spool of the host the retry runs on (a person copied it there, as
        ``SPOOL_MISSING`` asks): on a ledger whose hosts spool each on their own disk
        (``SPOOL_PER_HOST``) the job is leased to this host for ``lease_s`` likewise, so a run
        elsewhere, without the file, does not render and pay again before a run here has
        stored it; and one dead-lettered ``SPOOL_MISSING`` at its store step starts again at
        that step (on either engine), where it holds its output key as a spooled render
        (``_check_output``): from the probe it held nothing, and another job of the key paid
        for a render of its own, one of the two thrown away at its store. A conditional
        update: of two racing retries, or a retry racing a worker's terminal write, one wins.
        Returns the ids of the jobs it put back: none (writing nothing) if the job is not
        failed, dead or cancelled, or no longer has the status ``job`` was read with (cancelled
        by a person since a retry of the batch's failed jobs selected it), else the job's, then those of the dependents that failed
        because of it (``DEPENDENCY_FAILED``) and wait for it again (``afc retry`` says so).
        ``dependents=False``: the job alone, those left failed (``afc cancel`` giving a failed
        job up, retried and cancelled in one transaction: put back, its dependents were failed
        again at once, each with a ``retried`` event nobody made, a second ``job.failed``
        webhook, and the cancel said they failed with it).
        """
        with self.tx():
            self.hold_unmoved()
            # before the job's row: a walk may want it (_reblock_dependents)
            self._hold_walk([job["batch"]])
            here = host_lease() if spooled_here and self.SPOOL_PER_HOST else None
            if not self._requeue(job, by, lease_s, here, spooled=spooled_here):
                return []
            return [job["id"], *(self._reblock_dependents(job, by) if dependents else [])]

    # a job ended at its store step with its paid render spooled (``retry``): dead-lettered
    # there (its upload kept failing), or cancelled while it waited to store it; or so at its
    # verify step (its upload taken, its read-back failing: an S3 object not there yet), put
    # back at store, whose create-only write finds its own upload or makes it again
    SPOOLED_DEAD_SQL = (
        "(step IN ('store', 'verify') AND (status = 'cancelled'"
        " OR (status = 'dead' AND error_code = 'STORE_FAILED')))"
    )
    # one whose last attempt's paid render came after it ended, so none of its steps records
    # it (a late result, kept in that host's spool when the storage refused it), cancelled
    # before its store step, or retried and then dead-lettered STORE_FAILED at its probe
    # (``retry``: it goes back to the probe, leased to that host for a lease); or failed at its
    # store step for an object another put at its key (its render kept in that host's spool:
    # retried once a person removed that object, a worker elsewhere paid for it again)
    LATE_SPOOLED_SQL = (
        "(((step IN ('probe', 'render') AND (status = 'cancelled'"
        " OR (status = 'dead' AND error_code = 'STORE_FAILED')))"
        " OR (step = 'store' AND status = 'failed'"
        " AND error_code IN ('OUTPUT_KEY_CONFLICT', 'IDEMPOTENCY_CONFLICT')))"
        " AND EXISTS (SELECT 1 FROM attempts a WHERE a.job_id = jobs.id"
        " AND a.number = jobs.attempts AND a.status = 'succeeded'))"
    )
    # one dead-lettered at its store step for want of its spool file, given it back (``retry``)
    SPOOL_GIVEN_SQL = "(status = 'dead' AND error_code = 'SPOOL_MISSING' AND step = 'store')"

    def _requeue(
        self,
        job: dict[str, Any],
        by: str,
        lease_s: float = 300.0,
        here: str | None = None,
        *,
        spooled: bool = False,
    ) -> bool:
        """``retry``'s update and event for one job (in the caller's transaction); ``here``:
        the host lease of the host whose spool has the job's file, ``spooled``: whether this
        host's spool has it (``retry``'s ``spooled_here``)."""
        from afc_cli.providers.base import GONE_PREFIX

        now = self.clock()
        rendered = self._one(
            "SELECT owner FROM attempts WHERE job_id = ? AND status = 'succeeded'"
            " ORDER BY number DESC LIMIT 1",
            (job["id"],),
        )
        spooled_at = host_lease_of(rendered["owner"]) if rendered and rendered["owner"] else None
        stored_by = self.SPOOLED_DEAD_SQL if spooled_at else "1 = 0"
        late = f"({stored_by} OR {self.LATE_SPOOLED_SQL})" if spooled_at else stored_by
        leased = "1 = 1" if here is not None else late
        at_store = f"({stored_by} OR {self.SPOOL_GIVEN_SQL})" if spooled else stored_by
        cursor = self.db.execute(
            # a job with needs waits for them again (they may have been retried too)
            "UPDATE jobs SET status = CASE WHEN EXISTS (SELECT 1 FROM job_needs n"
            " WHERE n.job_id = jobs.id) THEN 'blocked' ELSE 'queued' END,"
            f" step = CASE WHEN {at_store} THEN 'store' ELSE 'probe' END,"
            f" lease_owner = CASE WHEN {leased} THEN ? END,"
            f" lease_expires = CASE WHEN {leased} THEN ? END,"
            " lease_mono = NULL,"
            # a synchronous provider's paid render left at its output URL (``answer_url``):
            # kept too, a cancelled job's as well (its cancel stopped nothing: it was made)
            " attempt_base = CASE WHEN EXISTS"
            " (SELECT 1 FROM attempts a WHERE a.job_id = jobs.id AND a.number = jobs.attempts"
            " AND a.status IN ('unknown', 'started') AND (a.answer_url IS NOT NULL"
            " OR ((jobs.status <> 'cancelled' OR ? = 1) AND a.provider_request_id IS NOT NULL"
            " AND COALESCE(a.error_message, '') NOT LIKE ?)))"
            " THEN attempts - 1 ELSE attempts END,"
            " retries = retries + 1,"
            " takeovers = 0, store_failures = 0,"
            " outcome = NULL, error_code = NULL, error_class = NULL, error_provider = NULL,"
            " error_http_status = NULL, error_message = NULL, waiting_reason = NULL,"
            " finished_at = NULL, updated_at = ?"
            # still as the caller read it: 'afc retry --batch B --failed' reads its jobs, then
            # puts them back one by one (50,000: a minute or two), and a job a person gave up
            # meanwhile ('afc cancel KEY') was queued again, said 'was failed', and paid for
            " WHERE id = ? AND status = ? AND status IN ('failed', 'dead', 'cancelled')",
            (
                here or spooled_at or "",
                self.lease_clock() + lease_s,
                1 if job["status"] == "cancelled" and self._cancel_left_polling(job) else 0,
                GONE_PREFIX + "%",
                now,
                job["id"],
                job["status"],
            ),
        )
        if cursor.rowcount != 1:
            return False
        self._event(
            job["id"],
            job["batch"],
            "retried",
            by=by,
            previous_status=job["status"],
            previous_error=job.get("error_code"),
        )
        return True

    def _cancel_left_polling(self, job: dict[str, Any]) -> bool:
        """For a cancelled job: whether its last attempt's request, left at a job-style
        provider (``started`` or ``unknown``, its id recorded), is still to be polled by a
        retry rather than paid for again. So it is when no cancel asked the provider about it
        (``PROVIDER_CANCELS``: the cancel was cut off between its commit and its request, so
        the render goes on, paid), when the latest cancel was not seen to stop it
        (``provider_cancel_failed``: the key not set where 'afc cancel' ran, no answer, an
        error status; the render may go on, paid: taken as stopped, the retry paid for a new
        one beside it; one the provider did stop reads 'cancelled' when polled, and a new
        request follows, ``pipeline._stopped_by_retried_cancel``), or when the provider
        answered the latest that the request had completed already (``CANCEL_TOO_LATE``: paid
        for, its result there to fetch); not once a cancel asked the provider to stop it."""
        from afc_cli.providers import PROVIDERS

        last = self._one(
            "SELECT a.provider, a.provider_request_id FROM attempts a JOIN jobs j"
            " ON j.id = a.job_id AND a.number = j.attempts WHERE a.job_id = ?"
            " AND a.status IN ('started', 'unknown') AND a.provider_request_id IS NOT NULL",
            (job["id"],),
        )
        if last is None or not getattr(PROVIDERS.get(last["provider"]), "resumable", False):
            return False
        answers = [
            row["kind"]
            for row in self._all(
                f"SELECT kind, detail_json FROM events WHERE job_id = ? AND kind IN"
                f" {_in(PROVIDER_CANCELS)} ORDER BY id",
                (job["id"],),
            )
            if json.loads(row["detail_json"] or "{}").get("request") == last["provider_request_id"]
        ]
        return not answers or answers[-1] in (CANCEL_TOO_LATE, CANCEL_FAILED)

    def release(self, job: dict[str, Any]) -> None:
        """Free a job this run holds but did not finish (it waits, or the run is stopping);
        a job left ``running`` goes back to ``queued``. One whose rendered output is in this
        host's spool (``_spooled_here``) goes to this host instead (``owner.host_lease``), for
        what is left of this run's lease: a run on another host would find no spool file."""
        here = self._spooled_here(job["id"])
        with self.tx():
            given = self._give_back(job["id"], here)
        if given:
            job.update(
                lease_owner=host_lease() if here else None,
                lease_expires=job["lease_expires"] if here else None,
            )
            if job["status"] == "running":
                job["status"] = "queued"

    def _give_back(self, job_id: str, here: bool) -> bool:
        """This run's lease of a job it did not finish, given up: to nobody, or (``here``: its
        output is in this host's spool) to this host for what is left of the lease. A job
        left ``running`` goes back to ``queued``. Whether the job was this run's."""
        cursor = self.db.execute(
            "UPDATE jobs SET lease_owner = ?, lease_mono = NULL,"
            " lease_expires = CASE WHEN ? THEN lease_expires ELSE NULL END,"
            " status = CASE WHEN status = 'running' THEN 'queued' ELSE status END"
            f" WHERE id = ? AND lease_owner = ? AND status NOT IN {TERMINAL_SQL}",
            (host_lease() if here else None, here, job_id, self.owner),
        )
        return cursor.rowcount == 1

    def _spooled_here(self, job_id: str) -> bool:
        """Whether this host's spool holds a job's rendered output (a ``.spool`` file): only a
        run on this host can store it (or adopt it) without paying for it again. Released so,
        a job goes to this host rather than to any (``release``, ``release_all``): a worker
        whose round could not start with storage down, a stopping run, gave such a job to
        every host, and another host's worker dead-lettered it ``SPOOL_MISSING``."""
        try:
            return (self.spool_root() / f"{job_id}.spool").exists()
        except OSError:
            return False

    # --- steps ----------------------------------------------------------------------------------

    def _checkpoint(self, job: dict[str, Any], steps: Any) -> None:
        """Record completed steps, ``[(step, detail), ...]``, in one statement, after the
        steps the job completed without a write of their own (``job["unwritten_steps"]``,
        ``[(step, detail, at), ...]``: a probe that found nothing). Called in a transaction
        whose fenced update of the job has succeeded."""
        steps = [*job.pop("unwritten_steps", ()), *steps]
        if not steps:
            return
        now = self.clock()
        params: list[Any] = []
        for step, detail, *at in steps:
            params += (job["id"], step, at[0] if at else now, _dumps(detail))
        self.db.execute(
            "INSERT INTO steps (job_id, step, completed_at, detail_json) VALUES "
            + ", ".join(["(?, ?, ?, ?)"] * len(steps))
            + " ON CONFLICT (job_id, step) DO NOTHING",
            params,
        )

    def checkpoint(
        self,
        job: dict[str, Any],
        steps: list[tuple[str, dict[str, Any] | None]],
        next_step: str,
        **updates: Any,
    ) -> None:
        """Record completed steps and move the job to its next step, in one transaction.

        Raises JobLost (writing nothing) if the job ended meanwhile, e.g. it was cancelled."""
        with self.tx():
            self._update_job(job, step=next_step, **updates)  # refuses before writing
            self._checkpoint(job, steps)

    def _update_job(self, job: dict[str, Any], **updates: Any) -> None:
        """Conditional update of a non-terminal job we hold; keeps ``job`` in step with it."""
        updates["updated_at"] = self.clock()
        assignments = ", ".join(f"{name} = ?" for name in updates)
        cursor = self.db.execute(
            f"UPDATE jobs SET {assignments} WHERE id = ? AND lease_owner = ?"
            f" AND status NOT IN {TERMINAL_SQL}",
            [*updates.values(), job["id"], self.owner],
        )
        if cursor.rowcount != 1:
            raise JobLost(job["id"])
        job.update(updates)

    def set_waiting(
        self,
        job: dict[str, Any],
        reason: str,
        *,
        here_for_s: float | None = None,
        paused_s: float | None = None,
        **updates: Any,
    ) -> None:
        """The job waits (a backoff, the budget, a full disk, storage), resting at its step:
        one the job reached without a write of its own (``render`` after a probe that found
        nothing) is written here, with its step rows (``_checkpoint``).

        ``here_for_s``: the job stays leased to this host (``owner.host_lease``) for that long
        instead of being freed: its paid output is in this host's spool alone, so a run on
        another host would find no spool file (``SPOOL_MISSING``); any run here takes it,
        but ``paused_s``: no worker's round here takes it before that many seconds have
        passed (``lease_mono``, this host's monotonic clock: ``_claim_held``); a person's
        ``afc resume`` takes it at once."""
        with self.tx():
            updates.setdefault("step", job["step"])
            if here_for_s is not None:
                updates.update(
                    lease_owner=host_lease(),
                    lease_expires=self.lease_clock() + here_for_s,
                    lease_mono=None if paused_s is None else time.monotonic() + paused_s,
                )
            self._update_job(job, status="waiting", waiting_reason=reason, **updates)
            self._checkpoint(job, ())
            self._event(job["id"], job["batch"], "waiting", reason=reason)

    # --- attempts -------------------------------------------------------------------------------

    def start_attempt(
        self,
        job: dict[str, Any],
        chain_index: int,
        provider: str,
        model: str,
        wait_s: float | None,
        *,
        durable: bool,
        run_id: str | None = None,
        reserve_micros: int | None = None,
        cap_micros: int | None = None,
        limit: tuple[int | None, int | None] | None = None,
        pending_micros: int = 0,
    ) -> int | None:
        """Commit an attempt row (status ``started``) before its provider call.

        Under a provider's limits (``limit``: its ``concurrency`` and ``per_minute`` from the
        manifest), the attempts of every process on this ledger count, checked in this same
        transaction (``_check_limit``): over either, ProviderBusy is raised and nothing is
        written.

        Under a budget (``cap_micros``), the attempt's estimated cost is reserved in this same
        transaction: the run's spend so far (each attempt's known cost, else its reservation)
        plus this estimate must fit the cap, or BudgetExhausted is raised and nothing is
        written. Transactions are serialised, so no number of concurrent workers can start
        more than the budget allows. ``pending_micros``: what the requests an earlier run
        left, which this run will take over, are to count (``left_requests``), counted as
        spent already; under a shared budget, with those its live siblings hold to take over
        (``adopting_elsewhere``).

        The job's step is written with the attempt (``job["step"]``: ``render`` when the probe
        found nothing, which writes nothing of its own), and so are the steps it completed
        without a write (``_checkpoint``): a fresh job's first attempt is three statements.

        Returns the attempt number, or None if the job is no longer ours or no longer active.
        The attempt's ``started_at`` is on the ledger's clock (``clock``).
        """
        # the start on both clocks at one moment (``report_attempt`` measures the call's length
        # from it): the boot-time clock read after the transaction, which may wait for a lock
        # (a shared budget's, held by a sibling worker stopped for seconds), put the call's end
        # that long early, before its request had left
        now, awake = self.clock(), awake_clock()
        # Committed before the call: here outside a run loop (synced alone when durable);
        # otherwise the caller awaits ``committed()``, shared with other jobs starting now,
        # which also syncs the WAL when any of them is durable.
        with self.tx(sync_on_commit=durable):
            if cap_micros is not None:
                self._hold_budget(run_id)
                spent = self.run_spend(run_id) + pending_micros
                if (run_id or "").startswith(SHARED_BUDGET):
                    spent += self.adopting_elsewhere(run_id, self.owner)
                if spent + (reserve_micros or 0) > cap_micros:
                    raise BudgetExhausted(
                        spent, cap_micros, reserve_micros or 0, priced=reserve_micros is not None
                    )
            if limit is not None and any(limit):
                self._check_limit(provider, *limit)
            shared = self._check_output(job)
            cursor = self.db.execute(
                "UPDATE jobs SET attempts = ?, status = 'running', step = ?,"
                " waiting_reason = NULL, updated_at = ? WHERE id = ? AND lease_owner = ?"
                f" AND attempts = ? AND status NOT IN {TERMINAL_SQL}",
                (job["attempts"] + 1, job["step"], now, job["id"], self.owner, job["attempts"]),
            )
            if cursor.rowcount != 1:
                return None
            number = job["attempts"] + 1
            job.update(attempts=number, status="running", waiting_reason=None, updated_at=now)
            job["output_shared"] = shared
            self._checkpoint(job, ())
            self.db.execute(
                "INSERT INTO attempts (job_id, number, chain_index, provider, model, status,"
                " owner, wait_s, started_at, run_id, reserved_micros)"
                " VALUES (?, ?, ?, ?, ?, 'started', ?, ?, ?, ?, ?)",
                (
                    job["id"],
                    number,
                    chain_index,
                    provider,
                    model,
                    self.owner,
                    wait_s,
                    now,
                    run_id,
                    reserve_micros,
                ),
            )
        if self._began is None:
            self._began = {}
        self._began[(job["id"], number)] = (now, awake)
        return number

    def _check_output(self, job: dict[str, Any]) -> bool:
        """Whether another job of this job's output key in its storage holds the key: raises
        OutputBusy when one is rendering it (``running``, or ``waiting`` while its job-style
        provider renders its request, its lease live: a dead process's
        job stops counting when its lease expires, or at once when it died on this host),
        raises OutputHeld when one that no live run works on holds a paid render of the key
        that can still be stored (``_pending_render``: rendered here too, one of the two
        renders would be refused at its store, paid for nothing), and
        returns True when one may have stored an output under it (the caller looks in storage
        after this attempt's row is committed, before the request leaves: ``pipeline.render``).
        The jobs of the key whose run is gone at their render step are kept in
        ``job["output_left"]`` (id, key, batch): a run that died after its paid render landed
        in its host's spool, before the checkpoint saying so, left a render its next run
        adopts, which only that host's spool tells (``pipeline._spooled_left``).

        Two batches of one storage whose output template leaves out {batch} give two jobs one
        key. Run by two processes at once, both probes found the key free and both renders
        were paid, the second thrown away at its store (OUTPUT_KEY_CONFLICT); one process runs
        them one after the other by itself (``run._note_outputs``). Here, in start_attempt's
        transaction and under the engine's lock for the key (``_hold_output``), the first to
        start holds the key until its job stops running; the others wait, then look. A job
        that waits is ``waiting``, never ``running``, so two jobs never wait on each other.
        One index lookup (``jobs_output_holders``, afc_cli/migrations.py m011), empty for
        nearly every job."""
        held = self._hold_output(job["output_key"])
        rows = self._output_holders(job)
        if not held():
            raise OutputBusy(None, None, self.OUTPUT_RACE_S)
        if not rows:
            return False
        refusal = self._holding(rows)
        if refusal is not None:
            self._let_go_of_output()
            raise refusal
        job["output_left"] = [
            (row[8], row[0], row[1]) for row in rows if row[2] == "running" and row[6] == "render"
        ]
        # one that may have stored an output under the key (not a dead-lettered one, whose
        # spooled render was lost)
        return any(row[2] != "dead" for row in rows)

    def _output_holders(self, job: dict[str, Any]) -> list[tuple]:
        """The other jobs of this job's output key in its storage that may hold it (rows of
        ``OUTPUT_HOLDERS_LOOKUP``). A waiting job holds the key only while its provider renders
        its request (polled: Replicate, fal) or its render waits in the spool for storage; one
        waiting out a backoff, a budget or another key holds nothing."""
        rows = self.db.execute(
            OUTPUT_HOLDERS_LOOKUP, (job["output_key"], job["id"], job["batch"]) * 4
        ).fetchall()
        return [
            row
            for row in rows
            if row[2] != "waiting" or (row[5] or "").startswith(RENDERING) or row[6] == "store"
        ]

    def _holding(self, rows: list[tuple]) -> OutputBusy | OutputHeld | None:
        """Of ``_output_holders``: OutputBusy when a live run renders the key, OutputHeld when
        a job no live run works on holds a paid render of it (``_pending_render``), else None."""
        now = self.lease_clock()
        for key, batch, status, owner, expires, reason, _, _, _, mono in rows:
            working = status == "running" or (reason or "").startswith(RENDERING)
            # held as a claim judges it (``owner.lease_held``): a live run of this host by
            # its monotonic expiry, so a wall clock stepped past its lease does not free the
            # key under its render for a second paid one
            if working and expires is not None and lease_held(owner, float(expires), now, mono):
                return OutputBusy(batch, key, self.OUTPUT_POLL_S)
        for key, batch, status, _, _, reason, step, error, holder, _ in rows:
            pending = _pending_render(key, batch, status, reason, step, error)
            if pending is not None:
                return OutputHeld(batch, key, *pending, job_id=holder)
        return None

    def lease_holders(self, batch: str | None = None) -> dict[str, int]:
        """The owners other than this process that hold leases of active jobs of ``batch`` (or
        of the ledger), with how many each: what an idle ``afc worker --until-idle`` waits
        for (``worker.work``). Read only; looked up by the (batch, status) index."""
        scope, params = _batch_scope(batch)
        rows = self.db.execute(
            f"SELECT lease_owner, COUNT(*) FROM jobs WHERE {scope} AND status IN {ACTIVE_SQL}"
            " AND lease_owner IS NOT NULL AND lease_owner <> ? GROUP BY lease_owner",
            [*params, self.owner],
        ).fetchall()
        return {owner: int(count) for owner, count in rows}

    def host_id_sharers(self) -> list[str]:
        """Owners of live leases (not run out by the ledger's clock) of active jobs that name
        this host's id but whose pids are of another process table (``owner.sees_process``:
        another machine, boot or pid namespace; a host's spool hold is none). What a worker
        starting says (``worker.work``): another machine or container runs afc under this
        host id, or this one restarted within a lease. Read only; the prefix compared as it
        is, as ``_claim_held`` does. Each batch's active jobs looked up in the (batch, status)
        index (``_batch_scope``), not every job of the ledger read."""
        here_prefix = host_of(self.owner) + ":"
        every_batch, _ = _batch_scope(None)
        rows = self.db.execute(
            f"SELECT DISTINCT lease_owner FROM jobs WHERE {every_batch} AND status IN {ACTIVE_SQL}"
            " AND substr(lease_owner, 1, ?) = ? AND lease_owner <> ? AND lease_expires >= ?",
            (len(here_prefix), here_prefix, self.owner, self.lease_clock()),
        ).fetchall()
        return sorted(
            owner
            for (owner,) in rows
            if host_of(owner) == host_of(self.owner)
            and fingerprint_of(owner) is not None
            and not is_host_lease(owner)
            and not sees_process(owner)
        )

    def held_elsewhere(self, batch: str) -> list[dict[str, Any]] | None:
        """When every active job of ``batch`` is waiting on an output key that a job of
        another batch holds with a paid render no live run works on (``_holding``): those
        jobs, each with ``held`` (its OutputHeld); else None, found at the first job that is
        not (a batch waiting out a provider's backoff costs one lookup, not one a job). Only a
        run of the holder's batch ends such a wait, so a worker confined to ``batch`` is idle
        (``worker.work``'s ``--until-idle``). Read only, no lock: the next claim looks again."""
        found = []
        for job in self._all(
            "SELECT id, key, batch, status, output_key FROM jobs WHERE batch = ?"
            f" AND status IN {ACTIVE_SQL} ORDER BY status = 'waiting', seq",
            (batch,),
        ):
            rows = self._output_holders(job) if job["status"] == "waiting" else ()
            holding = self._holding(rows) if rows else None
            if not isinstance(holding, OutputHeld) or holding.batch == batch:
                return None
            found.append({**job, "held": holding})
        return found

    def _hold_output(self, output_key: str) -> Callable[[], bool]:
        """Serialise the output-key checks of one key across processes until the transaction
        ends; returns whether that was done (called after the lookup). SQLite's write
        transaction already does; PostgreSQL tries an advisory lock."""
        return _held

    def _let_go_of_output(self) -> None:
        """The attempt is refused (OutputBusy) while holding the engine's lock for the key:
        its transaction ends with the refusal, so the lock is not held while the job waits.
        SQLite rolls a refused block's own transaction back already; PostgreSQL's group
        transaction would stay open (``PostgresLedger._let_go_of_output``)."""

    # how soon an attempt refused because another job renders its output key looks again
    # (the waiting job backs off from there: pipeline._start_attempt), and how soon one whose
    # key another process was checking at that very moment tries again
    OUTPUT_POLL_S = 0.5
    OUTPUT_RACE_S = 0.05

    # how soon a call refused by a shared concurrency limit asks again (a slot frees when an
    # attempt of another process ends, which no process here is told about)
    LIMIT_POLL_S = 0.5
    # whether leases expire on this host's wall clock (SQLite: the ledger's clock is the
    # host's), which a step moves under a live run's lease; PostgreSQL's lease clock is the
    # server's, advanced by the boot-time clock, which no step of this host's moves
    LEASES_ON_WALL_CLOCK = True

    def _check_limit(self, provider: str, concurrency: int | None, per_minute: int | None) -> None:
        """Raise ProviderBusy when starting one more call to ``provider`` would pass its limits
        counted over the whole ledger: ``concurrency`` against the attempts in flight (status
        ``started``) of jobs whose lease is live (a dead process's call stops counting when
        its lease expires, or at once when it died on this host), ``per_minute`` against the
        attempts started in the last 60 s.
        Called in start_attempt's transaction, under the engine's lock for this provider
        (``_hold_limit``), so two processes cannot both take the last slot.

        Both windows are measured on the ledger's clock (``lease_clock``: the database
        server's on PostgreSQL), and the start times they count were stamped on it
        (``clock``), so hosts whose own clocks disagree count the same calls: a host whose
        clock is behind cannot squeeze in calls its stamps would date out of the minute, nor
        one ahead keep the minute full for longer than a minute."""
        self._hold_limit(provider)
        now = self.lease_clock()
        if concurrency:
            # The provider's calls in flight, read once, through m022's partial index
            # ``attempts_started`` (before it, each read scanned every attempt of the ledger
            # under its write lock, 33 ms at 300,000 attempts, and a second read for the calls
            # held by their monotonic expiry, below, doubled what each call's start waited)
            wall = self.LEASES_ON_WALL_CLOCK
            rows = self.db.execute(
                "SELECT a.owner, j.lease_owner, j.lease_expires, j.lease_mono FROM attempts a"
                " JOIN jobs j ON j.id = a.job_id WHERE a.provider = ? AND a.status = 'started'"
                + (
                    " AND (j.lease_expires >= ? OR j.lease_mono IS NOT NULL)"
                    if wall
                    else " AND j.lease_expires >= ?"
                ),
                (provider, now),
            ).fetchall()
            live = [row[0] for row in rows if row[2] is not None and float(row[2]) >= now]
            # the calls of live runs of this host whose lease ran out by the wall clock
            # alone (stepped forward by NTP): held by their monotonic expiry, as a claim
            # judges them (``owner.lease_held``), they are in flight all the same, also
            # where a dead process's calls fill the limit until they are counted out below
            held_here = sum(
                1
                for _, owner, expires, mono in rows
                if wall
                and expires is not None
                and float(expires) < now
                and lease_held(owner, float(expires), now, mono)
            )
            in_flight = len(live) + held_here
            if in_flight >= concurrency:
                # a call of a process known dead on this host frees its slot at once, as its
                # job is taken over at once (``claim``), not when its lease runs out
                dead = {owner: owner_is_dead(owner) for owner in set(live)}
                in_flight = held_here + sum(1 for owner in live if not dead[owner])
            if in_flight >= concurrency:
                raise ProviderBusy(
                    provider,
                    f"{plural(in_flight, 'call')} in flight across this ledger (limit {concurrency})",
                    self.LIMIT_POLL_S,
                )
        if per_minute:
            # A start dated more than a minute ahead of ``now`` was stamped before the clock
            # was set back (an NTP step; SQLite's clock is the host's): counted, it would keep
            # the minute full for as long as the step, every start refused and told to wait
            # that long. It counts no more (a provider's 429 costs nothing), and no wait is
            # longer than the minute. Counted in m023's index ``attempts_per_minute`` (before
            # it, each count read every attempt of the ledger: 0.68 s a start at 3,000,000).
            count, first = self.db.execute(
                "SELECT COUNT(*), MIN(started_at) FROM attempts WHERE provider = ?"
                " AND started_at > ? AND started_at <= ?",
                (provider, now - 60.0, now + 60.0),
            ).fetchone()
            if count >= per_minute:
                raise ProviderBusy(
                    provider,
                    f"{plural(count, 'call')} started in the last minute across this ledger "
                    f"(limit {per_minute})",
                    min(60.0, max(0.05, 60.0 - (now - float(first)))),
                )

    def _hold_limit(self, provider: str) -> None:
        """Serialise the limit checks of one provider across processes until the transaction
        ends. SQLite's write transaction already does; PostgreSQL takes an advisory lock."""

    def record_request_id(
        self, job: dict[str, Any], number: int, provider: str, request_id: str
    ) -> None:
        """Commit a job-style provider's request id the moment its submit returned: a run
        that dies after this polls the request instead of paying for a new one. In a run
        loop the caller awaits ``committed()``: a synced commit shared with the other submits
        that returned together (a thousand predictions submitted at once measured 27 s for
        5 s of work when each id was a synced commit of its own, the loop blocked on them)."""
        with self.tx(sync_on_commit=provider != "local"):
            self.db.execute(
                "UPDATE attempts SET provider_request_id = ? WHERE job_id = ? AND number = ?",
                (request_id_kept(request_id), job["id"], number),
            )
            self._rendering(job, provider, request_id)

    def _rendering(
        self,
        job: dict[str, Any],
        provider: str,
        request_id: str | None,
        *,
        at_url: bool = False,
    ) -> None:
        """The job is ``waiting`` while its provider renders a request this run polls (the
        contract's "provider still rendering"), its reason naming the request: ``afc status``
        tells it from a call in progress, and a run that stops leaves it so (released like any
        waiting job), as the next run polls that request rather than paying for a new one.
        ``at_url``: a synchronous provider's paid render whose output is fetched from the URL
        its answer named (``record_answer_url``), left to the next run likewise.
        Only a job this process holds; ``report_attempt`` puts it back to ``running`` when the
        provider answered. In the caller's transaction, with the request id."""
        reason = (
            f"{RENDERING}{provider}{AT_URL}"
            if at_url
            else f"{RENDERING}{provider} request {scrub(request_id or '?')}"
        )
        now = self.clock()
        cursor = self.db.execute(
            "UPDATE jobs SET status = 'waiting', waiting_reason = ?, updated_at = ?"
            f" WHERE id = ? AND lease_owner = ? AND status IN {ACTIVE_SQL}",
            (reason, now, job["id"], self.owner),
        )
        if cursor.rowcount == 1:
            job.update(status="waiting", waiting_reason=reason, updated_at=now)

    def still_rendering(
        self, job: dict[str, Any], provider: str, request_id: str | None, *, at_url: bool = False
    ) -> None:
        """``_rendering`` in a transaction of its own: a paid render whose attempt a run ended
        ``unknown`` for the next run to fetch (a spool it could not write:
        afc_cli/pipeline.py ``_not_kept``) holds the job's output key as before."""
        with self.tx():
            self._rendering(job, provider, request_id, at_url=at_url)

    def reopen_attempt(
        self,
        job: dict[str, Any],
        attempt: dict[str, Any],
        run_id: str | None = None,
        reserve_micros: int | None = None,
    ) -> bool:
        """Take over an attempt a dead run left submitted, to poll it to its end. It becomes
        ``run_id``'s: the run that learns its outcome and cost shows that cost in its summary
        and counts it against its budget (the run that submitted it ended saying it left an
        attempt of unknown cost); its ``attempt_resumed`` event names the run it came from
        (``from_run``). So a budget's counted spend may pass its cap by requests it adopted
        (and by answers that cost more than their reservations: README "Budget"), never by
        an attempt whose reservation did not fit. An attempt of a workers' shared budget (``afc worker
        --budget``, SHARED_BUDGET) stays that budget's: its other workers go on, and moved
        out, what it paid for would no longer count against their cap.

        ``reserve_micros``: what the adopting run reserves for the request (its batch's card as
        it is now, ``pipeline._reservation``), which replaces the reservation of the run that
        sent it while its cost is unknown. The answer is priced by that card: a card corrected
        from 0.025 to 0.25 an image between a killed run and its resume kept three adopted fal
        requests counted at 0.075, and ``afc resume --max-spend 0.35`` started a fourth call
        beside them, spending 1.00 where the same requests under a 0.25 card left it waiting.
        None (no per-image price now) keeps the reservation made: nothing known is let go."""
        with self.tx(commit=True):
            # A run that stopped (Ctrl-C, SIGTERM) leaving the request once its cost was known
            # (a paid render whose output it was fetching again, ``hold_known_cost``) showed
            # that cost in its own summary and budget: it stays that run's, or two runs'
            # summaries each counted the one render (and this run's budget paid for it again)
            reported = self._left_priced(job["id"], attempt["number"])
            cursor = self.db.execute(
                "UPDATE attempts SET status = 'started', owner = ?, ended_at = NULL,"
                " error_class = NULL, error_message = NULL, run_id = CASE WHEN run_id LIKE ?"
                " OR ? THEN run_id ELSE COALESCE(?, run_id) END, reserved_micros = CASE WHEN"
                " cost_micros IS NULL THEN COALESCE(?, reserved_micros) ELSE reserved_micros"
                " END WHERE id = ? AND status = 'unknown'",
                (
                    self.owner,
                    SHARED_BUDGET + "%",
                    reported,
                    run_id,
                    reserve_micros,
                    attempt["id"],
                ),
            )
            if cursor.rowcount == 1:
                self._rendering(
                    job,
                    attempt["provider"],
                    attempt["provider_request_id"],
                    at_url=bool(attempt.get("answer_url")),
                )
                before = attempt.get("run_id")
                moved = (
                    run_id is not None
                    and run_id != before
                    and not reported
                    and not (before or "").startswith(SHARED_BUDGET)
                )
                self._event(
                    job["id"],
                    job["batch"],
                    "attempt_resumed",
                    number=attempt["number"],
                    request=attempt["provider_request_id"],
                    # its cost now counts in this run's spend (and budget), not that run's
                    **({"from_run": before} if moved else {}),
                )
            return cursor.rowcount == 1

    def left_requests(
        self, job_ids: list[str], run_id: str | None, noted: set[str] = frozenset()
    ) -> list[dict[str, Any]]:
        """The last attempts of ``job_ids`` (since their retry, ``attempt_base``) that a run
        which stopped or died left at their provider, ``unknown`` with a request id or an
        answer's URL kept (``pipeline._resumable`` says which the next run takes over), or
        another process's ``started`` (a dead run's, made ``unknown`` by the claim), each
        with its job's ``batch`` and ``request_json``, and ``moves``: whether its cost would
        count in ``run_id``'s spend once taken over (``reopen_attempt``: not an attempt of a
        workers' shared budget or one a stopped run counted). A run under a budget counts
        them reserved before it starts a call of its own (``pipeline.count_adoptions``).
        ``noted``: jobs whose request id the spool kept (``Spool.note_request``), whose last
        such attempt is listed without one for the caller to match."""
        rows: list[dict[str, Any]] = []
        for ids, kept in ((job_ids, True), (sorted(noted), False)):
            for chunk in _chunks(ids, IN_CHUNK):
                rows.extend(
                    self._all(
                        "SELECT a.*, j.batch, j.request_json FROM jobs j JOIN attempts a"
                        f" ON {LEFT_AT_PROVIDER.format(holder='?')} WHERE j.id IN {_marks(chunk)}"
                        + (
                            f" AND {LEFT_KEPT}"
                            if kept
                            else " AND a.provider_request_id IS NULL AND a.answer_url IS NULL"
                        ),
                        [self.owner, *chunk],
                    )
                )
        for row in rows:
            row["moves"] = self._moves_into(run_id, row["run_id"], row["job_id"], row["number"])
        return rows

    def _moves_into(self, run_id: str | None, before: str | None, job_id: str, number: int) -> bool:
        """Whether a left attempt of ``before``'s (its ``run_id``) would count in ``run_id``'s
        spend once taken over (``reopen_attempt``): not an attempt of a workers' shared budget
        or one a stopped run counted (``_left_priced``)."""
        before = before or ""
        return (
            run_id is not None
            and before != run_id
            and not before.startswith(SHARED_BUDGET)
            and not self._left_priced(job_id, number)
        )

    def _left_priced(self, job_id: str, number: int) -> bool:
        """Whether a run stopped (``interrupt_attempt``) leaving the job's request once its
        cost was known (``attempt_left_polling`` with ``priced``): that run's summary and
        budget counted the cost, and the attempt has stayed that run's since. A run that died
        (SIGKILL) said nothing of it."""
        return any(
            detail.get("priced") and detail.get("number") == number
            for detail in (
                json.loads(row[0] or "{}")
                for row in self.db.execute(
                    "SELECT detail_json FROM events WHERE job_id = ?"
                    " AND kind = 'attempt_left_polling'",
                    (job_id,),
                ).fetchall()
            )
        )

    def interrupt_attempt(
        self,
        job: dict[str, Any],
        number: int,
        message: str | None = None,
        *,
        request_id: str | None = None,
    ) -> None:
        """A stopping run leaves a submitted job-style request (its id committed) to the next
        run: the attempt becomes ``unknown``/``interrupted`` until that run polls it again;
        so is a synchronous provider's paid render left at its output URL
        (``record_answer_url``; ``request_id``: its answer's, kept on the row), which the
        next run fetches. ``message`` replaces the attempt's default message (a cancelled
        job's request, which no run polls again, says its cost stays unknown). Only while
        this process owns it: a process that stalled past its lease and woke into a stopping
        run must not end the row another process reopened to poll (``reopen_attempt``), as
        ``report_attempt`` does not."""
        with self.tx(commit=True):
            cursor = self.db.execute(
                "UPDATE attempts SET status = 'unknown', error_class = 'interrupted',"
                " ended_at = ?, error_message = ?,"
                " provider_request_id = COALESCE(provider_request_id, ?)"
                " WHERE job_id = ? AND number = ?"
                " AND status = 'started' AND COALESCE(owner, ?) = ?",
                (
                    self.clock(),
                    scrub(message)
                    if message
                    else "afc stopped while the provider rendered it; the next run polls the request",
                    request_id_kept(request_id) if request_id else None,
                    job["id"],
                    number,
                    self.owner,
                    self.owner,
                ),
            )
            if cursor.rowcount == 1:
                cost = self.db.execute(
                    "SELECT cost_micros FROM attempts WHERE job_id = ? AND number = ?",
                    (job["id"], number),
                ).fetchone()[0]
                # its known cost is in this run's summary and budget (``reopen_attempt``)
                priced = {"priced": True} if cost is not None else {}
                self._event(
                    job["id"], job["batch"], "attempt_left_polling", number=number, **priced
                )

    def run_spend(self, run_id: str | None) -> int:
        """What a run's budget counts: known costs, and reservations where the cost is unknown
        (never shown as the run's spend: that is ``run_money``'s ``priced``). Their sum, kept
        by the ledger's triggers on the attempts (afc_cli/migrations.py, m019): one row read
        however many attempts the run has."""
        row = self.db.execute(
            "SELECT spend_micros FROM run_spend WHERE run_id = ?", (run_id,)
        ).fetchone()
        return int(row[0]) if row is not None else 0

    def reserved_in_flight(self, run_id: str | None, owner: str) -> int:
        """The reservations of ``owner``'s calls of ``run_id`` still in flight whose cost is
        not known yet: what this process's own calls may give back to the budget when they
        come back cheaper than estimated (a 429, a refusal, a failure: free)."""
        row = self.db.execute(
            "SELECT COALESCE(SUM(reserved_micros), 0) FROM attempts WHERE run_id = ?"
            " AND owner = ? AND status = 'started' AND cost_micros IS NULL",
            (run_id, owner),
        ).fetchone()
        return int(row[0])

    def reserved_elsewhere(self, run_id: str | None, owner: str) -> int:
        """The reservations of the calls of ``run_id`` (a shared budget's) that other live
        processes have in flight, cost unknown: what a sibling worker's calls may give back
        to the budget when they come back free. A call whose process is gone (its lease run
        out, or dead on this host) counts as its reservation for good, as the budget counts an
        attempt of unknown outcome: it gives nothing back."""
        now: float | None = None
        total = 0
        for reserved, holder, expires, mono in self.db.execute(
            "SELECT a.reserved_micros, j.lease_owner, j.lease_expires, j.lease_mono"
            " FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE a.run_id = ?"
            " AND a.owner <> ? AND a.status = 'started' AND a.cost_micros IS NULL"
            " AND a.reserved_micros IS NOT NULL AND j.lease_owner = a.owner",
            (run_id, owner),
        ).fetchall():
            if now is None:
                now = self.lease_clock()
            if lease_held(holder, expires, now, mono):
                total += int(reserved)
        return total

    def adopting_elsewhere(self, run_id: str | None, owner: str) -> int:
        """What the requests other live processes hold to take over will count in ``run_id``
        (a shared budget's) once they do (``reopen_attempt`` moves each in): the last
        attempts a run outside every shared budget left at their provider (``left_requests``'
        ``moves``) of the jobs another live process holds, at their known cost, else their
        reservation. A worker counts its own from its claim (``pipeline.count_adoptions``);
        its siblings did not, and started calls in the room those requests then filled."""
        now: float | None = None
        total = 0
        # the jobs held first, by their lease's index (CROSS JOIN: SQLite keeps that order;
        # joined as the planner liked on an empty ledger, every start of an attempt under a
        # shared budget read the whole attempts table)
        for counted, holder, expires, mono, before, job_id, number in self.db.execute(
            "SELECT COALESCE(a.cost_micros, a.reserved_micros), j.lease_owner, j.lease_expires,"
            " j.lease_mono, a.run_id, a.job_id, a.number FROM jobs j CROSS JOIN attempts a"
            f" WHERE {LEFT_AT_PROVIDER.format(holder='j.lease_owner')} AND {LEFT_KEPT}"
            " AND j.lease_owner IS NOT NULL AND j.lease_owner <> ?",
            (owner,),
        ).fetchall():
            if not counted:
                continue
            if now is None:
                now = self.lease_clock()
            if lease_held(holder, expires, now, mono) and self._moves_into(
                run_id, before, job_id, number
            ):
                total += int(counted)
        return total

    def run_money(self, run_id: str | None, owner: str | None = None) -> dict[str, int]:
        """A run's money as shown to a person: ``priced`` (the known costs of its attempts,
        the figure ``afc costs report`` sums as ``priced``), ``unknown_cost`` (its attempts
        whose cost is unknown: unpriced, or possibly paid) and ``reserved`` (the estimates
        the budget holds for those). ``run_spend`` adds the two for the budget only.
        ``owner``: only the attempts that process started (one worker's share of a budget
        that several workers' attempts share, under one run id)."""
        # ``unknown_cost`` counts ended attempts only: a call still in flight (another
        # worker's, under a shared budget's run id) has no cost yet, known or not
        row = self.db.execute(
            "SELECT COALESCE(SUM(cost_micros), 0),"
            " COALESCE(SUM(CASE WHEN cost_micros IS NULL AND status <> 'started' THEN 1 END), 0),"
            " COALESCE(SUM(CASE WHEN cost_micros IS NULL THEN reserved_micros END), 0)"
            " FROM attempts WHERE run_id = ?" + ("" if owner is None else " AND owner = ?"),
            (run_id,) if owner is None else (run_id, owner),
        ).fetchone()
        return {"priced": int(row[0]), "unknown_cost": int(row[1]), "reserved": int(row[2])}

    def adopted_counted(self, run_id: str, owner: str) -> int:
        """The known cost of the attempts of ``run_id`` that ``owner`` polled to their end
        after another process had stopped leaving them, their cost counted (a workers' shared
        budget: the attempt stays the budget's, ``reopen_attempt``, and its owner becomes the
        process that polls it): ``run_money``'s ``owner`` share counts them, though that other
        worker's line already did."""
        total = 0
        rows = self.db.execute(
            "SELECT a.job_id, a.number, a.cost_micros FROM attempts a WHERE a.run_id = ?"
            " AND a.owner = ? AND a.cost_micros IS NOT NULL AND EXISTS (SELECT 1 FROM events e"
            " WHERE e.job_id = a.job_id AND e.kind = 'attempt_left_polling')",
            (run_id, owner),
        ).fetchall()
        for job_id, number, cost in rows:
            left = None  # the first stop that counted its cost; polled again after it?
            for kind, detail in self.db.execute(
                "SELECT kind, detail_json FROM events WHERE job_id = ?"
                " AND kind IN ('attempt_left_polling', 'attempt_resumed') ORDER BY id",
                (job_id,),
            ).fetchall():
                about = json.loads(detail or "{}")
                if about.get("number") != number:
                    continue
                if kind == "attempt_left_polling" and about.get("priced") and left is None:
                    left = True
                elif kind == "attempt_resumed" and left:
                    total += int(cost)
                    break
        return total

    def run_costs(self, run_id: str | None) -> list[tuple]:
        """The known cost of each of ``run_id``'s attempts with its job's batch, provider,
        model and number: what a summary past its cap takes apart (``run.past_cap``)."""
        return self.db.execute(
            "SELECT a.job_id, j.batch, a.provider, a.model, a.number, a.cost_micros"
            " FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE a.run_id = ?"
            " AND a.cost_micros IS NOT NULL",
            (run_id,),
        ).fetchall()

    def attempts_cost(self, attempts: Collection[tuple[str, str, int]], run_id: str | None) -> int:
        """The known cost of ``attempts`` (job id, provider, number) that are still
        ``run_id``'s: the requests a run adopted from an earlier one (``run_money``'s
        ``priced`` counts them with the run's own)."""
        total = 0
        for job_id, provider, number in attempts:
            row = self.db.execute(
                "SELECT cost_micros FROM attempts WHERE job_id = ? AND provider = ?"
                " AND number = ? AND run_id = ?",
                (job_id, provider, number, run_id),
            ).fetchone()
            if row is not None and row[0] is not None:
                total += int(row[0])
        return total

    # Groupings of ``afc costs report --by``: the attempts' column and the avoided renders'.
    COST_GROUPS = {
        "provider": ("a.provider", "v.provider"),
        "model": ("a.provider || '/' || a.model", "v.provider || '/' || v.model"),
        "batch": ("j.batch", "v.batch"),
        "day": ("a.started_at", "v.at"),
    }

    # Whether each host's runs spool to a folder of their own (a shared PostgreSQL ledger's
    # AFC_SPOOL_DIR), so a job's spool file is on one host alone; a SQLite ledger's spool is
    # the folder beside its file, the same for every process that opens it
    SPOOL_PER_HOST = False

    def spool_root(self) -> Any:
        """The folder where this ledger's runs spool rendered bytes before storing them."""
        raise NotImplementedError

    @staticmethod
    def spool_root_of(url: Any) -> Any:
        """``spool_root`` of the ledger ``url`` names, without opening it (``afc plan``)."""
        raise NotImplementedError

    def spool_identity(self) -> str | None:
        """What tells this ledger's spool from another ledger's (``Spool.mark``), or None
        when no other ledger's runs can use its spool: a SQLite ledger's is named after its
        file (``afc.db-spool``)."""
        return None

    @staticmethod
    def read_spool_holder(url: Any, job_ids: Collection[str]) -> tuple[str | None, str, set]:
        """``spool_identity`` of the ledger ``url`` names, its name for messages, and which
        of ``job_ids`` are its jobs, without opening it (``afc plan``)."""
        return None, str(url), set(job_ids)

    # --- engine hooks for afc ledger copy (afc_cli/ledger/copy.py) --------------------------

    def snapshot(self) -> None:
        """First thing in a ``tx`` block: the block's reads see one moment of the ledger."""

    def read_one_moment(self) -> None:
        """A listing's reads, from here until ``close``, see one moment of the ledger: ``afc
        status``'s counts and the rows it streams after them were two reads, and a run's
        commit between them left one ``--json`` document whose ``counts`` disagreed with its
        ``jobs``. Only for a ledger opened to read (nothing is written on it afterwards).
        SQLite: a deferred transaction, its snapshot taken at the first read (WAL: writers
        still commit beside it). PostgreSQL ends it once a streamed listing's cursor is
        declared (``_stream``), its rows kept as of the moment."""
        self.db.execute("BEGIN")

    def chunks(self, sql: str, size: int) -> Iterator[list[tuple]]:
        """The rows of ``sql`` (no parameters), ``size`` at a time, never all in memory at
        once (``afc ledger copy`` of a ledger with millions of events). SQLite's cursor reads
        as it goes."""
        cursor = self.db.execute(sql)
        while rows := cursor.fetchmany(size):
            yield rows

    def lock_jobs(self) -> None:
        """After ``snapshot``: no other process commits a claim (or any change of a job) until
        this block ends (``afc ledger copy``). SQLite: the block's write lock does it."""

    def columns(self, table: str) -> list[str]:
        raise NotImplementedError

    def before_copy(self) -> None:
        """Inside the copy's transaction, before its rows go in. SQLite: nothing (m019's
        triggers add each copied attempt to its run's sum in place)."""

    def after_copy(self) -> None:
        """Inside the copy's transaction, once every row is in (ids included)."""

    def batches_grew(self) -> None:
        """After a transaction that added a batch (an admission's first). SQLite: nothing."""

    def _hold_budget(self, run_id: str | None) -> None:
        """Inside a transaction: nobody else checks this run's budget until it commits, so
        two workers cannot both fit the last estimate under the cap. SQLite's write lock,
        taken by every transaction, already does this."""

    # --- group commit (a run loop's, on either engine: sqlite.py, postgres.py) --------------

    async def _join_commit(self) -> None:
        """Wait for the next group commit, which every caller of this turn of the loop shares
        (``committed``): the first to ask schedules it for the next turn."""
        waiter = self._loop.create_future()
        self._waiters.append(waiter)
        if len(self._waiters) == 1:
            self._loop.call_soon(self._scheduled_flush)
        await waiter

    def _settle(self, waiters: list[Any], error: BaseException | None = None) -> None:
        """Tell ``committed()`` callers how their commit ended: done, or the ledger's error."""
        for waiter in waiters:
            if waiter.done():
                continue
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(self.write_error(error))

    def write_error(self, exc: BaseException | str) -> Exception:
        """What a failed write to this ledger says (``errors.ledger_write_error``; a
        PostgreSQL ledger also tells a session the server ended while this process was
        stopped, ``PostgresLedger.write_error``)."""
        return ledger_write_error(self.path, exc)

    def lease_clock(self) -> float:
        """Now, in the clock leases are measured by (the database's, where it has one)."""
        return _now()

    def clock_offset(self) -> float:
        """How far the ledger's clock is ahead of this host's (the database server's minus
        ours, on PostgreSQL: postgres.py measures it; nothing on SQLite, one machine)."""
        return 0.0

    def clock(self) -> float:
        """Now on the ledger's clock without a round trip to the database: this host's clock
        corrected by ``clock_offset``. Attempts are stamped with it, so the calls of every
        host are counted in one clock by ``per_minute`` (``_check_limit``). Deliveries are
        not: they are due on ``lease_clock``, the clock their claims compare with."""
        return _now() + self.clock_offset()

    def admission_cache(self) -> Any:
        """A context in which an admission's one transaction runs: an engine may give it more
        cache (sqlite.py). Nothing by default."""
        return contextlib.nullcontext()

    # The attempts of the jobs ``j`` picks (``cost_groups``, for one batch): SQLite looks up
    # each job's in the attempts (job_id, provider, number) index already; PostgreSQL reads
    # them a job at a time (a LATERAL subquery, which OFFSET 0 keeps from being flattened into
    # a join): joined, the server read every attempt of the ledger for a batch's report while
    # ``attempts`` was never analyzed (344 attempts a job estimated), and for a 5,000-job
    # batch after ANALYZE too, and a second time for its calls in flight (``status =
    # 'started'``, no index): 70 ms of server time for a 100-job batch among 100,100 jobs,
    # 2 ms a job at a time (tests/test_audit36b_costs_plan.py).
    BATCH_ATTEMPTS = "jobs j JOIN attempts a ON a.job_id = j.id"

    def day_sql(self, column: str) -> str:
        """The UTC date (``YYYY-MM-DD``) of a column of Unix seconds, in this engine's SQL."""
        raise NotImplementedError

    def cost_groups(
        self, by: str, *, batch: str | None, since: float | None
    ) -> dict[Any, dict[str, int]]:
        """``afc costs report``'s figures per group (afc_cli/costs_report.py says what each
        means). Each job's avoided render counts once, at its first row."""
        return self.cost_groupings((by,), batch=batch, since=since)[by]

    def cost_groupings(
        self, bys: tuple[str, ...], *, batch: str | None, since: float | None
    ) -> dict[str, dict[Any, dict[str, int]]]:
        """``cost_groups`` of each grouping of ``bys``, in one pass over the attempts: the
        attempts (and avoided renders) grouped by every grouping's key at once, each grouping's
        figures then added up from those groups (every figure is a count or a sum). ``afc
        serve``'s spend page and ``afc report --html`` show spend by provider, by model and by
        day: read once a grouping, every attempt of the ledger was read three times over (4-5 s
        a spend page at 345,000 attempts on SQLite)."""
        attempt_keys, avoided_keys = [], []
        for by in bys:
            attempt_key, avoided_key = self.COST_GROUPS[by]
            if by == "day":
                attempt_key, avoided_key = self.day_sql(attempt_key), self.day_sql(avoided_key)
            attempt_keys.append(attempt_key)
            avoided_keys.append(avoided_key)
        width = len(bys)
        grouped = ", ".join(str(n) for n in range(1, width + 1))
        where, params = _cost_filters("j.batch", "a.started_at", batch, since)
        v_where, v_params = _cost_filters("v.batch", "v.at", batch, since)
        # a batch's: its jobs' attempts, a job at a time (``BATCH_ATTEMPTS``); the ledger's: all
        attempts = "attempts a JOIN jobs j ON j.id = a.job_id"
        if batch is not None:
            attempts = self.BATCH_ATTEMPTS
        groupings: dict[str, dict[Any, dict[str, int]]] = {by: {} for by in bys}

        def add(keys: Any, **figures: int) -> None:
            for by, key in zip(bys, keys, strict=True):
                values = groupings[by].setdefault(key, {})
                for name, figure in figures.items():
                    values[name] = values.get(name, 0) + figure

        started = 0  # attempts with no outcome yet: the calls looked at below
        for row in self.db.execute(
            f"SELECT {', '.join(attempt_keys)}, CAST(COALESCE(SUM(a.cost_micros), 0) AS BIGINT),"
            " SUM(CASE WHEN a.cost_micros IS NULL AND a.status <> 'started' THEN 1 ELSE 0 END),"
            # the known cost of failed attempts and of those of unknown outcome
            " CAST(COALESCE(SUM(CASE WHEN a.status IN ('failed', 'unknown')"
            " THEN a.cost_micros END), 0) AS BIGINT),"
            " SUM(CASE WHEN a.status = 'unknown' THEN 1 ELSE 0 END),"
            " SUM(CASE WHEN a.status = 'started' THEN 1 ELSE 0 END)"
            f" FROM {attempts} WHERE {' AND '.join(where)} GROUP BY {grouped}",
            params,
        ):
            priced, unpriced, failed, unknown, calls = row[width:]
            started += int(calls or 0)
            add(
                row[:width],
                priced=int(priced),
                unpriced_attempts=int(unpriced or 0),
                failed_spend=int(failed),
                unknown_attempts=int(unknown or 0),
            )
        # A call whose run is gone (``owner.process_gone``: it ended on this host, or its
        # job's lease ran out) is marked unknown by the run that takes its job over
        # (``claim``), and until then was counted nowhere: after a crash, with no run since,
        # the report said no attempt was of unknown outcome or cost. It is counted as that
        # run will mark it, as a job's own figures count it (``gone_calls``); so is one of a
        # job that has ended (cancelled while its call was in flight) once its run is gone,
        # which no run will ever mark (``CALLS_OWNER_SQL``). A live run's is in flight.
        # Looked up only when the first statement counted any (on a 5,000-job batch with
        # none, the second statement took 26-31 ms for nothing).
        calls = ()
        if started:
            calls = self.db.execute(
                f"SELECT {', '.join(attempt_keys)}, CASE WHEN j.status IN {TERMINAL_SQL}"
                " THEN a.owner ELSE j.lease_owner END, j.lease_expires, j.lease_mono,"
                f" a.cost_micros FROM {attempts} WHERE a.status = 'started'"
                f" AND {' AND '.join(where)}",
                params,
            ).fetchall()
        now = self.lease_clock()
        for row in calls:
            owner, expires, mono, cost = row[width:]
            if not process_gone(owner, expires, now, mono):
                continue  # a call in flight: no cost yet, known or unknown
            if cost is None:
                add(row[:width], unknown_attempts=1, unpriced_attempts=1)
            else:
                add(row[:width], unknown_attempts=1, failed_spend=int(cost))
        # each job's first row, found in m025's index ``avoided_job`` (job_id, id); a batch's
        # from its own jobs: the first row of every job of the ledger, grouped for a batch's
        # report, took 0.66 s on SQLite and 2.9-4.3 s on PostgreSQL at 317,000 rows, three
        # times over in ``afc report --html --batch``
        first, first_params = "SELECT MIN(id) FROM avoided GROUP BY job_id", []
        if batch is not None:
            first = (
                "SELECT MIN(w.id) FROM jobs j JOIN avoided w ON w.job_id = j.id"
                " WHERE j.batch = ? GROUP BY w.job_id"
            )
            first_params = [batch]
        for row in self.db.execute(
            f"SELECT {', '.join(avoided_keys)}, COUNT(*),"
            " CAST(COALESCE(SUM(v.cost_micros), 0) AS BIGINT),"
            " SUM(CASE WHEN v.cost_micros IS NULL THEN 1 ELSE 0 END)"
            f" FROM avoided v WHERE v.id IN ({first}) AND {' AND '.join(v_where)}"
            f" GROUP BY {grouped}",
            [*first_params, *v_params],
        ):
            count, cost, unpriced = row[width:]
            add(
                row[:width],
                avoided_renders=int(count),
                avoided_cost=int(cost),
                avoided_unpriced=int(unpriced or 0),
            )
        return groupings

    def priced_answers(self, batch: str, models: Collection[tuple[str, str]]) -> list[tuple]:
        """The answers of ``models`` (provider, model) that the jobs of ``batch`` were charged
        for: each attempt's provider, model, recorded usage and its job's request, for a
        budget to learn what these models' answers have cost before its first call
        (``pipeline.dearest_known``)."""
        return priced_answers_of(self.db, batch, models, "?", self.BATCH_ATTEMPTS)

    def adopt_attempt(
        self,
        attempt_id: int,
        message: str,
        *,
        cost_micros: int | None = None,
        cost_source: str | None = None,
    ) -> None:
        """The attempt whose bytes a later run found (in the spool, or stored) succeeded after
        all; its cost stays unknown unless the stored object's metadata said it. Called inside
        the block that checkpoints what was found."""
        self.db.execute(
            "UPDATE attempts SET status = 'succeeded', error_class = NULL, error_message = ?,"
            " cost_micros = COALESCE(?, cost_micros), cost_source = COALESCE(?, cost_source)"
            " WHERE id = ?",
            (message, cost_micros, cost_source, attempt_id),
        )

    def record_avoided(
        self,
        job: dict[str, Any],
        reason: str,
        provider: str | None,
        model: str | None,
        cost_micros: int | None,
        cost_source: str | None,
    ) -> None:
        """A render that a stored output made unnecessary, and what it would have cost. Dated
        on the ledger's clock, as attempts are: ``afc costs report --since`` and ``--by day``
        take both on it."""
        at = self.clock()
        self.db.execute(
            "INSERT INTO avoided (job_id, batch, at, reason, provider, model, cost_micros,"
            " cost_source) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (job["id"], job["batch"], at, reason, provider, model, cost_micros, cost_source),
        )

    def forget_found(self, job: dict[str, Any]) -> None:
        """Take back the renders a job's output found in storage was counted as avoiding
        (``record_avoided``, reason ``stored``): its read-back failed (VERIFY_FAILED), so the
        object found was no usable output, and the job needs a new render (or its spool file)
        to succeed. Counted, ``afc costs report`` claimed a render avoided beside the one
        paid again. (A render adopted from the spool, ``spooled``, is this job's own paid
        render: kept.)"""
        self.db.execute("DELETE FROM avoided WHERE job_id = ? AND reason = 'stored'", (job["id"],))

    def report_attempt(
        self,
        job: dict[str, Any],
        number: int,
        *,
        chain_index: int,
        provider: str,
        model: str,
        status: str,
        error_class: str | None = None,
        http_status: int | None = None,
        error_message: str | None = None,
        provider_request_id: str | None = None,
        usage: dict[str, Any] | None = None,
        cost_micros: int | None = None,
        cost_source: str | None = None,
        started_at: float | None = None,
        ended_at: float | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        """Upsert on (job, provider, attempt number).

        A repeated report overwrites usage and cost, but never outcome, error or timing: the
        first report of an outcome stands. A report without a cost never erases a known one
        (with its usage and source): a render's cost written as it became known
        (``hold_known_cost``) stays when its attempt ends by the run's limit on the call or
        by an answer afc could not read later on (both report the cost unknown), where the
        paid render was left unpriced though the provider had said what it cost. A report
        from a process that no longer owns the attempt (a host stalled past its lease, whose
        attempt another process reopened to poll the same request, ``reopen_attempt``) ends
        nothing and replaces no known cost: it only gives a cost where none is known. ``started_at`` and ``ended_at`` are this
        host's clock; they are stored on the ledger's clock, as ``start_attempt`` stamps the
        start.
        """
        shift = self.clock_offset()
        ended = (ended_at if ended_at is not None else _now()) + shift
        started_at = started_at + shift if started_at is not None else None
        began = self._began.pop((job["id"], number), None) if self._began else None
        if began is not None:
            # a call of this process: where its end by the wall clock and its start plus its
            # length by the clock that counts a suspend and no step disagree, the wall clock
            # stepped during the call (NTP set it back an hour: it lasted -3590 s in 'afc
            # show', its end an hour before its start), and the second is its end (an
            # ``ended_at`` given is that long before now, by the wall clock)
            before = 0.0 if ended_at is None else _now() - ended_at
            measured = began[0] + awake_clock() - began[1] - before
            if abs(measured - ended) > CLOCK_STEP_S:
                ended = max(measured, began[0])
        mine = "COALESCE(attempts.owner, excluded.owner) = excluded.owner"
        open_ = f"attempts.status = 'started' AND {mine}"  # this report's outcome is the first
        priced = f"({mine} AND excluded.cost_micros IS NOT NULL) OR attempts.cost_micros IS NULL"
        self.db.execute(
            "INSERT INTO attempts (job_id, number, chain_index, provider, model, status,"
            " error_class, http_status, error_message, provider_request_id, owner, started_at,"
            " ended_at, duration_s, usage_json, cost_micros, cost_source, retry_after_s)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (job_id, provider, number) DO UPDATE SET"
            f" usage_json = CASE WHEN {priced} THEN excluded.usage_json"
            "   ELSE attempts.usage_json END,"
            f" cost_micros = CASE WHEN {priced} THEN excluded.cost_micros"
            "   ELSE attempts.cost_micros END,"
            f" cost_source = CASE WHEN {priced} THEN excluded.cost_source"
            "   ELSE attempts.cost_source END,"
            " provider_request_id = COALESCE(attempts.provider_request_id,"
            "   excluded.provider_request_id),"
            f" status = CASE WHEN {open_} THEN excluded.status ELSE attempts.status END,"
            f" error_class = CASE WHEN {open_} THEN excluded.error_class"
            "   ELSE attempts.error_class END,"
            f" http_status = CASE WHEN {open_} THEN excluded.http_status"
            "   ELSE attempts.http_status END,"
            f" error_message = CASE WHEN {open_} THEN excluded.error_message"
            "   ELSE attempts.error_message END,"
            f" ended_at = CASE WHEN {open_} THEN excluded.ended_at ELSE attempts.ended_at END,"
            f" retry_after_s = CASE WHEN {open_} THEN excluded.retry_after_s"
            "   ELSE attempts.retry_after_s END,"
            f" duration_s = CASE WHEN {open_}"
            "   THEN excluded.ended_at - attempts.started_at ELSE attempts.duration_s END",
            (
                job["id"],
                number,
                chain_index,
                provider,
                model,
                status,
                error_class,
                http_status,
                scrub(error_message),
                request_id_kept(provider_request_id),
                self.owner,
                started_at if started_at is not None else ended,
                ended,
                (ended - started_at) if started_at is not None else 0.0,
                _dumps(scrub_data(usage_kept(usage))),
                cost_micros,
                cost_source,
                retry_after_s,
            ),
        )
        if status in ("succeeded", "failed", "unknown") and (
            job.get("waiting_reason") or ""
        ).startswith(RENDERING):
            # the provider answered the request the job waited on: it is the run's again
            # (spooled, stored, or its next attempt), not a render still in progress; also
            # when the answer is that the request is gone (``unknown``: RequestGone)
            # tests freeze here: the attempt's row written, its job's not yet, in one
            # transaction (a host stalled between the two while another takes the job over)
            stall_point("answer_recorded")
            now = self.clock()
            cursor = self.db.execute(
                "UPDATE jobs SET status = 'running', waiting_reason = NULL, updated_at = ?"
                " WHERE id = ? AND lease_owner = ? AND status = 'waiting'",
                (now, job["id"], self.owner),
            )
            if cursor.rowcount == 1:
                job.update(status="running", waiting_reason=None, updated_at=now)

    def end_attempt(self, job: dict[str, Any], number: int, **report: Any) -> None:
        # tests freeze here, the run's changes so far committed: the report then begins a
        # transaction of its own (``answer_recorded``)
        stall_point("answer_coming", before=self.flush)
        with self.tx(commit=True):
            self.report_attempt(job, number, **report)

    # --- terminal writes ------------------------------------------------------------------------

    def finish(
        self,
        job: dict[str, Any],
        status: str,
        *,
        step: str,
        detail: dict[str, Any] | None = None,
        steps: Any = (),
        **fields: Any,
    ) -> bool:
        """Move a job to a terminal state. The first terminal state wins: this is a conditional
        update that matches only a non-terminal row, and a loser changes nothing.

        A run's end of a job it claimed (``job`` names this process as its holder) is also
        fenced by that lease, as its other writes are (``_update_job``): a worker that stalled
        past its lease, or whose call was still out when a person cancelled and retried the
        job, had its call's answer end the job ``CHAIN_FAILED`` under the run that took it
        over, or undo the person's retry (outside audit 53b). A person's end (``cancel``, a
        dependent failed with it) names another holder, or none, and is not fenced."""
        assert status in TERMINAL
        # on the ledger's clock, as admissions and reviews' starts are: a webhook's
        # ``timestamp`` orders a job's events, whichever host's clock wrote them
        now = self.clock()
        if fields.get("error_message"):
            fields["error_message"] = scrub_data(fields["error_message"], _SCRUB_MEMO.get())
        with self.tx():
            values = {
                "status": status,
                "step": "done" if status == "succeeded" else step,
                "lease_owner": None,
                "lease_expires": None,
                "waiting_reason": None,
                "finished_at": now,
                "updated_at": now,
                **fields,
            }
            assignments = ", ".join(f"{name} = ?" for name in values)
            held = self.owner is not None and job.get("lease_owner") == self.owner
            ended = self._all(
                f"UPDATE jobs SET {assignments} WHERE id = ? AND status NOT IN {TERMINAL_SQL}"
                + (" AND lease_owner = ?" if held else "")
                + f" RETURNING {RETURNED_NEWS}",
                [*values.values(), job["id"], *((self.owner,) if held else ())],
            )
            if len(ended) != 1:
                return False
            job.update(values, **ended[0])
            self._checkpoint(
                job, [*steps, *([("finish", detail)] if status == "succeeded" else [])]
            )
            self._event(
                job["id"],
                job["batch"],
                status,
                **(detail or {}),
                **{k: v for k, v in fields.items() if k.startswith("error_") or k == "outcome"},
            )
            if job.get("webhook_json"):
                self._queue_delivery(job, now)
        return True

    # --- webhook outbox ---------------------------------------------------------------------

    def has_webhooks(self, batch: str | None = None) -> bool:
        """Whether a delivery is pending, or an unfinished job has a webhook: of any batch,
        or (``batch``) of that one only, which a worker's loop asks of each batch it meets
        (run.py ``_open_batches``): asked of every batch there, each new batch's look read
        one index entry per batch ever admitted, and a loop meeting 3,000 batches spent 9.3 s
        of its 22 s on them."""
        # each batch's unfinished jobs looked up in the (batch, status) index, batch by batch:
        # written as ``_batch_scope``'s 'batch IN (SELECT name FROM batches)', SQLite read
        # every job of the ledger once its statistics were gathered (a user's ANALYZE), which
        # count the rows of an average (batch, status), most of them a finished status's
        jobs = (
            f"SELECT 1 FROM jobs j WHERE j.batch = ? AND j.status IN {ACTIVE_SQL}"
            " AND j.webhook_json IS NOT NULL"
        )
        row = self.db.execute(
            "SELECT EXISTS (SELECT 1 FROM deliveries WHERE status = 'pending')"
            + (
                f" OR EXISTS ({jobs})"
                if batch is not None
                else " OR EXISTS (SELECT 1 FROM batches b WHERE EXISTS ("
                + jobs.replace("j.batch = ?", "j.batch = b.name")
                + "))"
            ),
            (batch,) if batch is not None else None,
        ).fetchone()
        return bool(row[0])

    def webhook_secret_names(self, job_ids: list[str] | None = None) -> set[str]:
        """The webhook secret variables the jobs ``job_ids`` (None: every job) need: their
        webhooks' and their pending deliveries'. Another batch's pending delivery is not
        among them: a run that drains it without its secret leaves it pending with a note
        (``webhooks.Deliverer._deliver``), and a broken receiver's batch never blocks
        another's renders."""
        names: set[str] = set()
        chunks = [[]] if job_ids is None else list(_chunks(job_ids, IN_CHUNK))
        for chunk in chunks:
            where = f" AND id IN {_marks(chunk)}" if job_ids is not None else ""
            for (text,) in self.db.execute(
                "SELECT DISTINCT webhook_json FROM jobs WHERE webhook_json IS NOT NULL" + where,
                chunk,
            ):
                names.add(json.loads(text)["secret_env"])
            where = f" AND job_id IN {_marks(chunk)}" if job_ids is not None else ""
            for (name,) in self.db.execute(
                "SELECT DISTINCT secret_env FROM deliveries WHERE status = 'pending'" + where,
                chunk,
            ):
                names.add(name)
        return names

    # A delivery's lease: its own timeout (the POST is bounded by it, afc_cli/webhooks.py)
    # plus this margin (or the caller's, e.g. AFC_LEASE_S when shorter), on the ledger's clock.
    DELIVERY_LEASE_MARGIN_S = 120.0

    # a moved ledger's deliveries are the destination's to post (``afc ledger copy``): a
    # drain still going on the source (a deliver, a run's last pass) claims and holds none
    _NOT_MOVED = "NOT EXISTS (SELECT 1 FROM ledger_moves)"
    # a delivery to post: pending, due before the first parameter, its lease (if any) expired
    # before the second, its ledger not moved
    _DELIVERY_DUE = (
        "status = 'pending' AND next_attempt_at <= ? AND (lease_owner IS NULL OR lease_expires < ?)"
        f" AND {_NOT_MOVED}"
    )

    def due_delivery_urls(self, urls: tuple[str, ...], due_before: float) -> set[str]:
        """Which of ``urls`` have a delivery due before ``due_before`` and free to claim now
        (a run's last pass waits out a receiver's short Retry-After only for these)."""
        if not urls:
            return set()
        now = self.lease_clock()
        return {
            row[0]
            for row in self.db.execute(
                f"SELECT DISTINCT url FROM deliveries WHERE {self._DELIVERY_DUE}"
                f" AND url IN {_marks(list(urls))}",
                [due_before, now, *urls],
            ).fetchall()
        }

    def deliveries_due(self) -> bool:
        """Whether any delivery is due now and free to claim (an idle ``afc worker`` drains
        only then: a row waiting out its backoff costs it nothing)."""
        now = self.lease_clock()
        row = self.db.execute(
            f"SELECT EXISTS (SELECT 1 FROM deliveries WHERE {self._DELIVERY_DUE})", (now, now)
        ).fetchone()
        return bool(row[0]) or bool(self._dead_claims(now, now, "", []))

    def _dead_claims(
        self, before: float, now: float, where: str, params: list[Any]
    ) -> list[tuple[str, str]]:
        """Due deliveries (``next_attempt_at`` before ``before``) whose lease has not run out
        but whose owner is a process of this host known to be dead (``owner.owner_is_dead``,
        the rule a job's takeover follows): (id, owner), oldest due first. Such a process
        posts nothing more, and its connections closed as it died, so its rows are taken at
        once rather than after its lease (at least once: one it was posting is posted again,
        with the same webhook-id)."""
        here_prefix = host_of(self.owner) + ":"
        rows = self.db.execute(
            "SELECT id, lease_owner FROM deliveries WHERE status = 'pending'"
            " AND next_attempt_at <= ? AND lease_owner IS NOT NULL AND lease_expires >= ?"
            f" AND substr(lease_owner, 1, ?) = ? AND lease_owner <> ? AND {self._NOT_MOVED}"
            f"{where} ORDER BY next_attempt_at, id",
            [before, now, len(here_prefix), here_prefix, self.owner, *params],
        ).fetchall()
        dead = {owner: owner_is_dead(owner) for owner in {row[1] for row in rows}}
        return [(row[0], row[1]) for row in rows if dead[row[1]]]

    def held_deliveries(self) -> tuple[int, float | None]:
        """Due deliveries another process holds a live claim on (``claim_deliveries`` takes
        none of them), and when the last of those claims runs out (the ledger's clock):
        ``afc webhooks deliver`` says so rather than only that it sent nothing."""
        now = self.lease_clock()
        row = self.db.execute(
            "SELECT COUNT(*), MAX(lease_expires) FROM deliveries WHERE status = 'pending'"
            " AND next_attempt_at <= ? AND lease_owner IS NOT NULL AND lease_owner <> ?"
            f" AND lease_expires >= ? AND {self._NOT_MOVED}",
            (now, self.owner, now),
        ).fetchone()
        return int(row[0] or 0), row[1]

    def waiting_deliveries(self) -> tuple[int, float | None]:
        """Pending deliveries not due yet (waiting out their backoff or a Retry-After), and
        when the first of them is due (the ledger's clock): ``afc webhooks deliver`` posts
        only due ones, and its line of zeros read as "nothing is waiting" while they were."""
        now = self.lease_clock()
        row = self.db.execute(
            "SELECT COUNT(*), MIN(next_attempt_at) FROM deliveries WHERE status = 'pending'"
            f" AND next_attempt_at > ? AND {self._NOT_MOVED}",
            (now,),
        ).fetchone()
        return int(row[0] or 0), row[1]

    def claim_deliveries(
        self,
        limit: int,
        margin_s: float = DELIVERY_LEASE_MARGIN_S,
        *,
        due_before: float | None = None,
        skip_urls: tuple[str, ...] = (),
        skip_secrets: tuple[str, ...] = (),
        only: str | None = None,
    ) -> list[dict[str, Any]]:
        """Claim up to ``limit`` due deliveries for this process, oldest due first: pending,
        due (``next_attempt_at`` before ``due_before``, default now), free or leased by an
        owner whose lease expired. One transaction: the candidates are selected (on
        PostgreSQL ``FOR UPDATE SKIP LOCKED``: workers on other hosts claiming at the same
        moment take other rows instead of waiting on these), then leased by one conditional
        update that re-checks each, for its timeout plus ``margin_s``. Times are the
        ledger's clock (``lease_clock``: the database server's on PostgreSQL), so hosts
        whose clocks disagree agree on when a delivery is due and when its lease expired.
        ``skip_urls``: receivers this pass has given up on; ``skip_secrets``: secret variables
        this process found unset (their rows would only be claimed and released again, each
        pass) (afc_cli/webhooks.py); ``only``: that delivery alone (``afc webhooks replay``)."""
        now = self.lease_clock()
        before = now if due_before is None else due_before
        where = ""
        params: list[Any] = [before, now]
        if skip_urls:
            where = f" AND url NOT IN {_marks(list(skip_urls))}"
            params += list(skip_urls)
        if skip_secrets:
            where += f" AND secret_env NOT IN {_marks(list(skip_secrets))}"
            params += list(skip_secrets)
        if only is not None:
            where += " AND id = ?"
            params.append(only)
        with self.tx(commit=True):
            ids = [
                row[0]
                for row in self.db.execute(
                    f"SELECT id FROM deliveries WHERE {self._DELIVERY_DUE}{where}"
                    f" ORDER BY next_attempt_at, id LIMIT ?{self.CLAIM_LOCK}",
                    [*params, limit],
                ).fetchall()
            ]
            rows = []
            if ids:
                rows = self._all(
                    "UPDATE deliveries SET lease_owner = ?, lease_expires = ? + timeout_s"
                    f" WHERE id IN {_marks(ids)} AND status = 'pending'"
                    " AND (lease_owner IS NULL OR lease_expires < ?) RETURNING *",
                    [self.owner, now + margin_s, *ids, now],
                )
            # rows a process of this host that died had claimed, its lease still running:
            # taken at once, as its jobs are (``claim``), each only from that dead owner
            for delivery_id, dead in self._dead_claims(before, now, where, params[2:]):
                if len(rows) >= limit:
                    break
                rows += self._all(
                    "UPDATE deliveries SET lease_owner = ?, lease_expires = ? + timeout_s"
                    " WHERE id = ? AND status = 'pending' AND lease_owner = ? RETURNING *",
                    [self.owner, now + margin_s, delivery_id, dead],
                )
        return sorted(rows, key=lambda row: (row["next_attempt_at"], row["id"]))

    def hold_delivery(
        self, delivery_id: str, margin_s: float = DELIVERY_LEASE_MARGIN_S
    ) -> dict[str, Any] | None:
        """Right before a delivery is posted: keep it if it is still this process's, or free
        (our lease lapsed while it waited its turn and nobody took it), and extend the lease
        to cover the post (its timeout plus ``margin_s`` from now, the ledger's clock).
        Returns the row as it is now, or None when another process holds it or it is no
        longer pending: then it is not posted, so no delivery is sent twice while a lease on
        it is live. None too once ``afc ledger copy`` moved the ledger: its copy there is
        posted by the destination's runs, not also by a pass that claimed it here before."""
        now = self.lease_clock()
        with self.tx(commit=True):
            rows = self._all(  # every row fetched: no statement left open at the commit
                "UPDATE deliveries SET lease_owner = ?, lease_expires = ? + timeout_s"
                " WHERE id = ? AND status = 'pending'"
                " AND (lease_owner = ? OR lease_owner IS NULL OR lease_expires < ?)"
                f" AND {self._NOT_MOVED} RETURNING *",
                (self.owner, now + margin_s, delivery_id, self.owner, now),
            )
        return rows[0] if rows else None

    def release_delivery(self, delivery_id: str, note: str | None = None) -> bool:
        """Give a claimed delivery back unsent. With a ``note`` (why it was not sent: its
        secret is missing) it becomes due from now on, so the pass that released it does not
        claim it again; without one it keeps its place (a receiver skipped for this pass, a
        pass out of time)."""
        with self.tx(commit=True):
            if note is None:
                cursor = self.db.execute(
                    "UPDATE deliveries SET lease_owner = NULL, lease_expires = NULL"
                    " WHERE id = ? AND lease_owner = ?",
                    (delivery_id, self.owner),
                )
            else:
                cursor = self.db.execute(
                    "UPDATE deliveries SET lease_owner = NULL, lease_expires = NULL,"
                    " last_error = ?, next_attempt_at = ? WHERE id = ? AND lease_owner = ?",
                    (note, self.lease_clock(), delivery_id, self.owner),
                )
            return cursor.rowcount == 1

    def delivery_outcome(
        self,
        delivery_id: str,
        status: str,
        http_status: int | None,
        error: str | None,
        now: float,
    ) -> bool:
        """Record a try's end (``delivered`` or ``dead``) and free the row, only while this
        process still owns it: the owner is the fencing token, so a process whose lease was
        taken over never overwrites the new owner's outcome. Returns whether it was written."""
        with self.tx(commit=True):
            cursor = self.db.execute(
                "UPDATE deliveries SET status = ?, attempts = attempts + 1, last_status = ?,"
                " last_error = ?, delivered_at = CASE WHEN ? = 'delivered' THEN ? END,"
                " lease_owner = NULL, lease_expires = NULL WHERE id = ? AND lease_owner = ?"
                " AND status = 'pending'",
                (status, http_status, error, status, now, delivery_id, self.owner),
            )
            return cursor.rowcount == 1

    def delivery_retry(
        self,
        delivery_id: str,
        http_status: int | None,
        error: str | None,
        delay_s: float,
    ) -> bool:
        """Record a failed try and schedule the next one ``delay_s`` from now, on the ledger's
        clock; fenced by the owner as ``delivery_outcome``. Returns whether it was written."""
        with self.tx(commit=True):
            cursor = self.db.execute(
                "UPDATE deliveries SET attempts = attempts + 1, last_status = ?, last_error = ?,"
                " next_attempt_at = ?, lease_owner = NULL, lease_expires = NULL WHERE id = ?"
                " AND lease_owner = ? AND status = 'pending'",
                (http_status, error, self.lease_clock() + delay_s, delivery_id, self.owner),
            )
            return cursor.rowcount == 1

    def endpoint_disabled(self, url: str) -> bool:
        row = self.db.execute("SELECT disabled_at FROM endpoints WHERE url = ?", (url,)).fetchone()
        return bool(row and row[0])

    def disable_endpoint(self, url: str, reason: str, now: float) -> None:
        with self.tx(commit=True):
            self.db.execute(
                "INSERT INTO endpoints (url, disabled_at, reason) VALUES (?, ?, ?)"
                " ON CONFLICT (url) DO UPDATE SET disabled_at = excluded.disabled_at,"
                " reason = excluded.reason",
                (url, now, reason),
            )

    def delivery_counts(self, batch: str | None = None) -> dict[str, int]:
        """Deliveries still pending and dead, of one batch or all: what a run's summary says
        of its events that have not reached their receiver."""
        sql = "SELECT status, COUNT(*) FROM deliveries WHERE status IN ('pending', 'dead')"
        params: tuple[Any, ...] = ()
        if batch is not None:
            sql += " AND batch = ?"
            params = (batch,)
        counts = dict(self.db.execute(sql + " GROUP BY status", params).fetchall())
        return {status: int(counts.get(status, 0)) for status in ("pending", "dead")}

    def deliveries(self, dead_only: bool = False) -> list[dict[str, Any]]:
        return [row for rows in self.delivery_chunks(dead_only, whole=True) for row in rows]

    def delivery_chunks(
        self, dead_only: bool = False, *, whole: bool = False
    ) -> Iterator[list[dict[str, Any]]]:
        """``deliveries``, a chunk at a time (``_stream``): a ledger whose batches all post
        webhooks holds a row per job event, kept once delivered, and ``afc webhooks list
        --json`` of 100,000 of them held every row and its envelope (910 MiB) before writing
        the first. ``whole``: in one chunk, read at once."""
        sql = "SELECT * FROM deliveries"
        if dead_only:
            sql += " WHERE status = 'dead'"
        sql += " ORDER BY created_at, id"
        yield from [self._all(sql)] if whole else self._stream(sql)

    def job_deliveries(self, job_id: str) -> list[dict[str, Any]]:
        return self._all("SELECT * FROM deliveries WHERE job_id = ? ORDER BY created_at", (job_id,))

    def delivery(self, delivery_id: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM deliveries WHERE id = ?", (delivery_id,))

    def delivery_ids_starting(self, prefix: str, limit: int = 6) -> list[str]:
        """Ids of deliveries that begin with ``prefix`` (ids are accepted by unique prefix)."""
        rows = self.db.execute(
            "SELECT id FROM deliveries WHERE substr(id, 1, ?) = ? ORDER BY id LIMIT ?",
            (len(prefix), prefix, limit),
        )
        return [row[0] for row in rows]

    def requeue_delivery(self, delivery_id: str) -> bool:
        """Make a dead or delivered row pending again, due now (``lease_clock``, the clock the
        claims compare with, as an event written or retried: due on ``clock``, this host's
        estimate of the database's, a row was not due for the replay's own pass while that
        estimate ran ahead, tests/test_replay_due_on_lease_clock.py). A pending
        row too (a replay of it interrupted after this, told to run again; or one waiting for
        its next try), unless a process holds its lease (posting it now, or killed posting
        it): False then, nothing changed, so it is never posted twice at once."""
        with self.tx():
            row = self.delivery(delivery_id)
            cursor = self.db.execute(
                f"UPDATE deliveries SET {REQUEUED} WHERE id = ?"
                " AND (status <> 'pending' OR lease_owner IS NULL OR lease_expires < ?)",
                (self.lease_clock(), delivery_id, self.lease_clock()),
            )
            if cursor.rowcount != 1:
                return False
            self.db.execute("DELETE FROM endpoints WHERE url = ?", (row["url"],))
            self._event(row["job_id"], row["batch"], "webhook_replayed", delivery=delivery_id)
        return True

    def dead_delivery_secrets(self, batch: str | None = None) -> set[str]:
        """The secret variables the dead deliveries (of ``batch``) are signed with."""
        where, params = _batch_scope(batch)
        return {
            row[0]
            for row in self.db.execute(
                f"SELECT DISTINCT secret_env FROM deliveries WHERE status = 'dead' AND {where}",
                params,
            )
        }

    def _lock_deliveries(self, ids: list[str]) -> None:
        """Lock these delivery rows for this transaction in the order of their ids, the one
        order every writer of many of them takes (a re-submit moving a batch's webhook,
        ``_rewebhook``; ``afc webhooks replay --dead``). Each wrote a chunk (``IN_CHUNK``) at a
        time in an order of its own (the manifest's jobs; the dead rows as read), holding the
        earlier chunks' rows while it waited for a later one, which the other held while it
        waited for one of the first: a deadlock, PostgreSQL failing the submit or the replay.
        SQLite's write lock serialises writers already (``ROW_LOCK`` is empty there)."""
        for chunk in _chunks(sorted(ids), IN_CHUNK):
            self.db.execute(
                f"SELECT id FROM deliveries WHERE id IN {_marks(chunk)} ORDER BY id{self.ROW_LOCK}",
                chunk,
            ).fetchall()

    def requeue_dead_deliveries(self, batch: str | None = None) -> int:
        """Every dead delivery (of ``batch``) pending again, due now, its tries counted
        afresh, in one transaction (``afc webhooks replay --dead``); the endpoints a 410
        disabled among theirs enabled again, as a replay of one does. Returns how many."""
        where, params = _batch_scope(batch)
        with self.tx():
            rows = self._all(
                f"SELECT id, job_id, batch, url FROM deliveries WHERE status = 'dead' AND {where}",
                params,
            )
            now = self.lease_clock()  # due at once for the claims (``requeue_delivery``)
            ids = sorted(row["id"] for row in rows)
            self._lock_deliveries(ids)
            for chunk in _chunks(ids, IN_CHUNK):
                self.db.execute(
                    f"UPDATE deliveries SET {REQUEUED}"
                    f" WHERE status = 'dead' AND id IN {_marks(chunk)}",
                    [now, *chunk],
                )
                # tests freeze here: a chunk's rows written, the next chunk's not yet
                stall_point("requeued_chunk")
            for url in sorted({row["url"] for row in rows}):
                self.db.execute("DELETE FROM endpoints WHERE url = ?", (url,))
            for row in rows:
                self._event(row["job_id"], row["batch"], "webhook_replayed", delivery=row["id"])
        return len(rows)

    def _queue_delivery(
        self, job: dict[str, Any], now: float, review: dict[str, Any] | None = None
    ) -> None:
        """The transactional outbox: the delivery row commits with the terminal update that
        produced it, so no terminal state exists without its event. Its id is stable (job id
        and event, and the retry count once a person retried the job: each retry's ending is
        news of its own), and inserting it again does nothing. It is due at once, on the
        ledger's clock (``lease_clock``, the one the claims compare it with: ``clock``
        can be ahead of it by a sample's error, which left a delivery queued just before a
        run's last webhook pass undue in that pass). A person's decision
        (``review``: decision, by, note) rides in the envelope's ``data.review``."""
        from afc_cli.costs import job_cost

        webhook = json.loads(job["webhook_json"])
        event = "failed" if job["status"] == "dead" else job["status"]
        # a call still ``started`` is in flight (a job cancelled under a live run: ``cancel``
        # marked the calls of runs that are gone ``unknown`` in its transaction): its cost is
        # not known yet, so not one of ``unpriced_attempts``, as ``afc status`` counts it
        # (``JOB_COST_SQL``); its answer's cost is in status and the costs report, not in a
        # later event (README, webhooks)
        priced = self.db.execute(
            "SELECT CAST(SUM(cost_micros) AS BIGINT), COUNT(*),"
            " SUM(CASE WHEN cost_micros IS NULL AND status <> 'started' THEN 1 ELSE 0 END)"
            " FROM attempts WHERE job_id = ?",
            (job["id"],),
        ).fetchone()
        error = None
        if job.get("error_message"):
            error = {
                "code": job.get("error_code"),
                "class": job.get("error_class"),
                "message": scrub(job.get("error_message")),
            }
        envelope = {
            "type": f"job.{event}",
            # to the microsecond, as Standard Webhooks' examples: a receiver orders a job's
            # events by it (a retried one arrives after a later one), and two events of one
            # job within a second (a pause and a scripted approval) had one whole second
            "timestamp": dt.datetime.fromtimestamp(now, tz=dt.UTC).strftime(
                "%Y-%m-%dT%H:%M:%S.%fZ"
            ),
            "data": {
                "job_id": job["id"],
                "key": job["key"],
                "batch": job["batch"],
                "status": job["status"],
                "output_key": job["output_key"]
                if job["status"] in ("succeeded", "awaiting_review", "rejected")
                else None,
                "cost": job_cost(priced[0], priced[1]),
                # the attempts of unknown cost that ``cost`` leaves out (as ``afc status
                # --json``): the job's real cost is higher by theirs
                "unpriced_attempts": int(priced[2] or 0),
                "error": error,
            },
        }
        if review is not None:
            envelope["data"]["review"] = review
        self.db.execute(
            "INSERT INTO deliveries (id, job_id, batch, event, url, secret_env, timeout_s,"
            " envelope, status, next_attempt_at, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?) ON CONFLICT (id) DO NOTHING",
            (
                f"{job['id']}:job.{event}"
                + (f":retry{job['retries']}" if job.get("retries") else ""),
                job["id"],
                job["batch"],
                f"job.{event}",
                webhook["url"],
                webhook["secret_env"],
                webhook.get("timeout_s", 10.0),
                json.dumps(envelope, separators=(",", ":")),
                self.lease_clock(),
                now,
            ),
        )

    # --- review gates, needs and inputs (afc_cli/review.py, docs/pipeline.md) -----------------

    def _admit_needs(self, batch: str, jobs: list[Any]) -> None:
        """The jobs each fresh job waits for (its ``needs``, and the jobs its inputs use)."""
        from afc_cli.manifest import job_id_for

        rows = [(j.job_id, job_id_for(batch, need), need) for j in jobs for need in j.needs]
        if rows:
            self.db.conn.executemany(
                "INSERT INTO job_needs (job_id, need_id, need_key) VALUES (?, ?, ?)"
                " ON CONFLICT (job_id, need_id) DO NOTHING",
                rows,
            )

    # a job's needs with their current status (``ended_needs`` reads these columns)
    _NEEDS = (
        "n.need_id, n.need_key, j.status, j.batch, j.error_code"
        " FROM job_needs n LEFT JOIN jobs j ON j.id = n.need_id"
    )

    def needs_of(self, job_id: str) -> list[dict[str, Any]]:
        """A job's needs with their current status (None: not in the ledger)."""
        return self._all(
            f"SELECT {self._NEEDS} WHERE n.job_id = ? ORDER BY n.need_key{self.CODE_POINT}",
            (job_id,),
        )

    def needs_of_many(self, job_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        """``needs_of`` for many jobs, a chunk of ids per query: job id -> its needs (a job
        with none maps to an empty list). ``run.follow_decisions`` read each failed
        dependent's needs with a query of its own: a style frame rejected before 50,000 shots
        made every later ``afc resume`` and ``afc queue stats`` send 50,000 queries (2 s on
        SQLite, 11 s on PostgreSQL)."""
        found: dict[str, list[dict[str, Any]]] = {job_id: [] for job_id in job_ids}
        for chunk in _chunks(list(found), IN_CHUNK):
            rows = self._all(
                f"SELECT n.job_id, {self._NEEDS} WHERE n.job_id IN {_marks(chunk)}"
                f" ORDER BY n.job_id, n.need_key{self.CODE_POINT}",
                chunk,
            )
            for row in rows:
                found[row.pop("job_id")].append(row)
        return found

    def dependents_of(self, job_id: str) -> list[dict[str, Any]]:
        return self._all(
            "SELECT j.* FROM job_needs n JOIN jobs j ON j.id = n.job_id WHERE n.need_id = ?"
            " ORDER BY j.seq",
            (job_id,),
        )

    def settle_blocked(self, job_id: str, failed: list | None = None) -> tuple[str, list[str]]:
        """Decide a blocked job against its needs, in one transaction: every need succeeded
        -> ``queued`` (event ``unblocked``); a need failed, rejected, cancelled or dead -> the
        job fails with ``DEPENDENCY_FAILED`` naming it; else it stays ``blocked``. Returns the
        job's status and, while blocked, the ids of the needs it still waits for. A job that
        is not blocked is left as it is. ``failed``: the job's id is appended to it when this
        call failed it; the status returned is ``failed`` too when another process (another
        worker's look, a rejection) had failed it since the caller read it blocked."""
        with self.tx():
            job = self.job(job_id)
            if job is None:
                return "missing", []
            if job["status"] != "blocked":
                return job["status"], []
            needs, ended, waiting = self._needs_state(job_id)
            if waiting and not ended:
                return "blocked", waiting
            self._alone()  # another run may be settling the same job
            # Decided again under the job's row lock: a re-submit that gave the job new needs
            # since they were read (``_regate``, which writes the row before the needs) is
            # waited for, never overwritten by a ``queued`` that would render the job first.
            job = self._one(f"SELECT * FROM jobs WHERE id = ?{self.ROW_LOCK}", (job_id,))
            if job["status"] != "blocked":
                return job["status"], []
            needs, ended, waiting = self._needs_state(job_id)
            if waiting and not ended:
                return "blocked", waiting
            if ended:
                self._fail_dependency(job, ended[0])
                if failed is not None and job["status"] == "failed":
                    failed.append(job_id)
                return job["status"], []
            cursor = self.db.execute(
                "UPDATE jobs SET status = 'queued', updated_at = ? WHERE id = ?"
                " AND status = 'blocked'",
                (self.clock(), job_id),
            )
            if cursor.rowcount == 1:
                self._event(job_id, job["batch"], "unblocked", needs=[n["need_key"] for n in needs])
                return "queued", []
            return self.job(job_id)["status"], []

    def _needs_state(self, job_id: str) -> tuple[list[dict[str, Any]], list, list[str]]:
        """A job's needs, those that ended badly (or are missing), and the ids of those it
        still waits for."""
        needs = self.needs_of(job_id)
        ended = ended_needs(needs)
        waiting = [n["need_id"] for n in needs if n["status"] != "succeeded"]
        return needs, ended, waiting

    def _fail_dependency(self, job: dict[str, Any], need: dict[str, Any]) -> None:
        key = need["need_key"]
        if need["status"] is None:
            why = f"need {key!r} is not in the ledger, so this job was not rendered"
        elif need["status"] == "rejected":  # final: 'afc retry' refuses it
            why = (
                f"need {key!r} ended rejected, so this job was not rendered; a rejected job is "
                "final: a new job under a new key replaces it, and the jobs that need it name "
                "that key (under new keys of their own)"
            )
        elif need["status"] == "cancelled":
            why = (
                f"need {key!r} was cancelled, so this job was not rendered; 'afc retry {key}' "
                "puts it back, and this job with it"
            )
        elif need["status"] == "failed" and need.get("error_code") == "DEPENDENCY_FAILED":
            # failed for a job it needs in turn: retrying it alone fails it again at once (a
            # rejected or cancelled job up the chain is still so); the job that ended badly
            # is the one to retry, which puts both back (``_reblock_dependents``)
            why = (
                f"need {key!r} ended failed, itself DEPENDENCY_FAILED (a job it needs ended "
                f"badly: 'afc show {key}' names it), so this job was not rendered; a retry of "
                f"the job that ended badly puts {key!r} and this job back (a rejected one is "
                "final: new keys replace it and the jobs after it)"
            )
        else:
            why = (
                f"need {key!r} ended {need['status']}, so this job was not rendered; once "
                f"{key!r} is fixed, 'afc retry {key}' lets this job run again"
            )
        self.finish(
            job,
            "failed",
            step=job["step"],
            outcome="failed",
            error_code="DEPENDENCY_FAILED",
            error_class="dependency",
            error_message=why,
        )

    def _fail_dependents(self, need_id: str, batch: str) -> int:
        """Fail, transitively, the blocked jobs that wait for a job that just ended badly
        (in the caller's transaction); returns how many. A level of the walk at a time, not
        a call per link: a chain of a thousand jobs rejected or cancelled at its head passed
        Python's recursion limit, and the decision was refused as an unexpected error. Each
        level's blocked jobs are read and locked, and their needs read, a chunk per query
        (``_needing``, ``needs_of_many``); each then fails naming its first need that
        ended badly (``_fail_dependency``), as ``settle_blocked`` would. A job per
        ``settle_blocked`` sent seven statements: a style frame rejected or cancelled before
        10,000 shots on PostgreSQL took 13 s, the ledger's rows of those jobs held meanwhile."""
        self._hold_walk([batch])
        level = [need_id]
        failed = 0
        with _scrubbing_once():  # the same few texts for every dependent
            while level:
                blocked = self._needing(level, "status = 'blocked'", lock=True)
                needs = self.needs_of_many([job["id"] for job in blocked])
                level = []
                for job in blocked:
                    ended = ended_needs(needs[job["id"]])
                    # always so (one of its needs just ended badly); read under its lock
                    if ended:
                        self._fail_dependency(job, ended[0])
                        if job["status"] == "failed":
                            level.append(job["id"])
                failed += len(level)
        return failed

    def _needing(
        self, need_ids: list[str], where: str, *, lock: bool = False
    ) -> list[dict[str, Any]]:
        """The jobs that need any of ``need_ids`` and match ``where``, each once, in
        admission order, a chunk per query. ``lock``: their rows locked (PostgreSQL), in one
        order (by id) for every process, as ``settle_blocked`` locks one: a worker settling
        one of them waits for this transaction, then finds it no longer blocked."""
        found: dict[str, dict[str, Any]] = {}
        for chunk in _chunks(need_ids, IN_CHUNK):
            any_of, params = self._any_of("need_id", chunk)  # one statement on PostgreSQL
            for row in self._all(
                f"SELECT * FROM jobs WHERE {where} AND id IN (SELECT job_id FROM job_needs"
                f" WHERE {any_of}) ORDER BY id{self.ROW_LOCK if lock else ''}",
                params,
            ):
                found.setdefault(row["id"], row)
        return sorted(found.values(), key=lambda job: (job["batch"], job["seq"]))

    def _reblock_dependents(self, job: dict[str, Any], by: str) -> list[str]:
        """A retried job's dependents that failed because of it wait for it again, and
        theirs in turn (a level at a time, as ``_fail_dependents``); returns their ids.
        Their rows are read without a row lock: a failed row changes only by a retry (this
        walk's, or a cancel's give-up path, which retries first) or a re-submit, and each
        holds the batch's walk lock taken here (no ending, ``finish``, touches a terminal
        row), so none changes between this read and ``_requeue``'s update."""
        self._hold_walk([job["batch"]])
        level = [job["id"]]
        back: list[str] = []
        with _scrubbing_once():  # the same few texts for every dependent
            while level:
                failed = self._needing(
                    level, "status = 'failed' AND error_code = 'DEPENDENCY_FAILED'"
                )
                level = [row["id"] for row in failed if self._requeue(row, by)]
                back += level
        return back

    def await_review(self, job: dict[str, Any], steps: Any = ()) -> bool:
        """Pause a verified job for a person's review, with its checkpoints, its event and its
        ``job.awaiting_review`` webhook row in one transaction. Its output is stored; no run
        touches it again (it is neither active nor terminal) until a decision. Dated on the
        ledger's clock, as an admission is (``queue_stats``' review age).

        Fenced by the run's lease, as ``finish`` is: a person's cancel and retry while the
        run read the output back was overwritten with ``awaiting_review``, and a run that had
        taken the retried job lost it, its own pause refused (outside audit 55g)."""
        now = self.clock()
        with self.tx():
            values = {
                "status": "awaiting_review",
                "step": "review",
                "lease_owner": None,
                "lease_expires": None,
                "waiting_reason": None,
                "review_at": now,
                "updated_at": now,
            }
            assignments = ", ".join(f"{name} = ?" for name in values)
            held = self.owner is not None and job.get("lease_owner") == self.owner
            paused = self._all(
                f"UPDATE jobs SET {assignments} WHERE id = ? AND status NOT IN {TERMINAL_SQL}"
                " AND status <> 'awaiting_review'"
                + (" AND lease_owner = ?" if held else "")
                + f" RETURNING {RETURNED_NEWS}",
                [*values.values(), job["id"], *((self.owner,) if held else ())],
            )
            if len(paused) != 1:
                return False
            job.update(values, **paused[0])
            self._checkpoint(job, steps)
            self._event(job["id"], job["batch"], "awaiting_review", output_key=job["output_key"])
            if job.get("webhook_json"):
                self._queue_delivery(job, now)
        return True

    def decide_reviews(
        self,
        jobs: list[dict[str, Any]],
        decision: str,
        *,
        by: str,
        note: str | None,
        sha256: dict[str, str] | None = None,
    ) -> int:
        """Approve (-> ``succeeded``) or reject (-> ``rejected``) jobs awaiting review, all or
        none, in one transaction: each status change is guarded by the status it leaves
        (``WHERE status = 'awaiting_review'``), so of two concurrent decisions on one job one
        wins; the loser raises ReviewRace and writes nothing (the rows are updated in the
        order of their ids, so two decisions on the same jobs never wait for each other
        both). The decision row (who, when,
        why), the event and the webhook row commit with the status change; a rejection also
        fails the jobs waiting for it (DEPENDENCY_FAILED): returns how many it failed.

        ``sha256``: job id -> the SHA-256 of the output the decision is about (the one
        ``afc review list`` or the review page showed); the status change is guarded by it
        too, in this transaction, so a job rendered again since (cancelled, retried, awaiting
        review with another picture) raises ReviewRace with the SHA-256 it has now, nothing
        written: a check read before the transaction let a re-render slip in between."""
        assert decision in ("approved", "rejected")
        sha256 = sha256 or {}
        now = self.clock()  # the ledger's, as ``finish`` (its webhook's ``timestamp``)
        # a NUL as \x00: PostgreSQL's text holds none (psycopg's DataError stopped the
        # decision there, uncaught by afc serve, where SQLite kept it raw); a note is typed
        # by a person, and a NUL is no part of one (a form posted by hand)
        note = scrub(note).replace("\x00", "\\x00") if note else note
        failed = 0
        with self.tx():
            self.hold_unmoved()
            # the walk's lock (a rejection's walk) before the jobs' rows, an approval's too: a
            # re-submit holding it (shared) writes their changed webhooks in its manifest's
            # order, these rows are locked in id order below, and an approval of two jobs
            # beside a re-submit changing both webhooks deadlocked with it, one failing
            self._hold_walk({job["batch"] for job in jobs})
            # in one order (job id) whatever order the keys were named in: two reviewers
            # deciding the same jobs at once each locked a first row and waited for the
            # other's, a deadlock PostgreSQL broke by failing one with a ledger error
            for job in sorted(jobs, key=lambda job: job["id"]):
                if decision == "approved":
                    values: dict[str, Any] = {"status": "succeeded", "step": "done"}
                else:
                    values = {
                        "status": "rejected",
                        "outcome": "rejected",
                        "error_code": "REJECTED",
                        "error_class": "review",
                        "error_message": f"rejected by {by}: {note}",
                    }
                values.update(finished_at=now, updated_at=now)
                assignments = ", ".join(f"{name} = ?" for name in values)
                expected = sha256.get(job["id"])
                guard = "" if expected is None else " AND output_sha256 = ?"
                # where its event goes as the row has it now, not as the command read it: a
                # re-submit that moved (or added) the batch's webhook between that read and
                # this transaction (on PostgreSQL the decision waits for its lock) had the
                # decision's event sent to the URL the manifest no longer names, or not
                # written at all (outside audit 65k)
                decided_rows = self._all(
                    f"UPDATE jobs SET {assignments} WHERE id = ? AND status = 'awaiting_review'"
                    + guard
                    + f" RETURNING {RETURNED_NEWS}",
                    [*values.values(), job["id"], *([] if expected is None else [expected])],
                )
                if len(decided_rows) != 1:
                    now_row = self.db.execute(
                        "SELECT status, output_sha256 FROM jobs WHERE id = ?", (job["id"],)
                    ).fetchone()
                    if expected is not None and now_row and now_row[0] == "awaiting_review":
                        raise ReviewRace(job["key"], job["batch"], expected, now_row[1])
                    raise ReviewRace(job["key"], job["batch"])
                job.update(values, **decided_rows[0])
                self.db.execute(
                    "INSERT INTO reviews (job_id, batch, decision, decided_by, note, decided_at)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (job["id"], job["batch"], decision, by, note, now),
                )
                if decision == "approved":
                    self._checkpoint(job, [("finish", {"output_key": job["output_key"]})])
                self._event(job["id"], job["batch"], decision, by=by, note=note)
                if job.get("webhook_json"):
                    decided = {"decision": decision, "by": by, "note": note}
                    self._queue_delivery(job, now, review=decided)
                if decision == "rejected":
                    failed += self._fail_dependents(job["id"], job["batch"])
            _crash_point("review_uncommitted")  # crash tests: everything written, no commit
        _crash_point("review_committed")
        return failed

    def review_rows(self, batch: str | None = None) -> list[dict[str, Any]]:
        """Jobs awaiting review, oldest first, with their storage, cost and model."""
        sql = (
            "SELECT j.id, j.key, j.batch, j.output_key, j.output_sha256, j.request_json, j.review_at, "
            "b.storage, "
            + JOB_COST_SQL
            + ", (SELECT a.provider || '/' || a.model FROM attempts a WHERE a.job_id = j.id"
            " AND a.status = 'succeeded' ORDER BY a.number DESC LIMIT 1) AS model"
            " FROM jobs j JOIN batches b ON b.name = j.batch"
        )
        # looked up in the (batch, status) index: by status alone, every job row of the ledger
        # was read to find the few awaiting review (_batch_scope)
        scope, params = _batch_scope(batch, "j.batch")
        sql += f" WHERE {scope} AND j.status = 'awaiting_review'"
        rows = self._all(sql + f" ORDER BY j.review_at, j.batch{self.CODE_POINT}, j.seq", params)
        # an output found in storage (no attempt made it here): the model that made it, from
        # the stored object, as the contact sheet names it (``sheet_rows``)
        found = self._stored_models([row["id"] for row in rows if row["model"] is None])
        for row in rows:
            row["model"] = row["model"] or found.get(row["id"])
        return self.gone_calls(rows)

    def reviews(self, job_id: str) -> list[dict[str, Any]]:
        return self._all("SELECT * FROM reviews WHERE job_id = ? ORDER BY id", (job_id,))

    def _review_stats(
        self, counts: dict[str, int], now: float, batches: Collection[str]
    ) -> dict[str, Any]:
        # of the batches that have some (``status_pairs``), IN_CHUNK a statement, so the
        # (batch, status, ...) index finds the jobs awaiting review
        ages = [
            self.db.execute(
                f"SELECT MIN(review_at) FROM jobs WHERE batch IN {_marks(chunk)}"
                " AND status = 'awaiting_review'",
                chunk,
            ).fetchone()[0]
            for chunk in _chunks(list(batches), IN_CHUNK)
        ]
        oldest = min((age for age in ages if age is not None), default=None)
        return {
            "blocked": counts.get("blocked", 0),
            "awaiting_review": counts.get("awaiting_review", 0),
            "oldest_review_age_seconds": 0 if oldest is None else max(0, int(now - oldest)),
        }

    def hold_known_cost(
        self,
        job: dict[str, Any],
        number: int,
        provider: str,
        cost_micros: int,
        cost_source: str | None,
    ) -> None:
        """A call's cost is known the moment it returns, but its attempt's end is written
        with the spool checkpoint, after the job gave its slot to the next render: until
        then the budget holds this cost instead of the estimate, so the next attempt's check
        counts what the call really cost (a call dearer than its per-image estimate, or one
        that returned more images, no longer lets further calls start past the cap).

        The cost is the attempt's from here on, too: a process that ends before the spool
        checkpoint leaves the attempt (``unknown``, or ``succeeded`` once a later run adopts
        its spool file) at the cost it was paid, where it was recorded unpriced although the
        ledger held the figure. Its outcome, usage and timing come with the checkpoint."""
        with self.tx():
            self.db.execute(
                "UPDATE attempts SET reserved_micros = ?, cost_micros = ?, cost_source = ?"
                " WHERE job_id = ? AND provider = ? AND number = ? AND status = 'started'",
                (cost_micros, cost_micros, cost_source, job["id"], provider, number),
            )

    def price_left(
        self,
        job: dict[str, Any],
        number: int,
        provider: str,
        cost_micros: int,
        usage: dict[str, Any],
    ) -> None:
        """The cost of an attempt a dead run left (``started`` or ``unknown``) and a cancel
        found rendered and billed at its provider (``ops._price_completed``), with the usage
        that prices it: its outcome stays what it was (a retry polls the request by its id and
        stores its result, ``reopen_attempt``), its cost known. A cost already there stays.
        The usage is the provider's answer, kept as ``report_attempt`` keeps one (scrubbed,
        each value bounded): a metric of megabytes quoting the key was kept whole."""
        kept = _dumps(scrub_data(usage_kept(usage)))
        with self.tx():
            self.db.execute(
                "UPDATE attempts SET cost_micros = ?, cost_source = 'derived',"
                " reserved_micros = ?, usage_json = COALESCE(usage_json, ?)"
                " WHERE job_id = ? AND provider = ? AND number = ?"
                " AND status IN ('started', 'unknown') AND cost_micros IS NULL",
                (cost_micros, cost_micros, kept, job["id"], provider, number),
            )

    def record_answer_url(
        self,
        job: dict[str, Any],
        number: int,
        provider: str,
        url: str,
        cost_micros: int | None,
        cost_source: str | None,
        request_id: str | None = None,
        usage: dict[str, Any] | None = None,
    ) -> None:
        """The output URL a synchronous provider's paid answer named (an OpenAI-compatible
        gateway's: valid about an hour), with the render's known cost, its usage (what the
        cost was derived from: the run that fetches the URL ends the attempt with it) and the
        answer's id
        (``request_id``: OpenAI's ``x-request-id``, kept as ``request_id_kept`` keeps any),
        committed (synced) by the caller before the download begins: a run stopped or killed
        before the download ends leaves the attempt to the next run, which fetches that URL
        for free (afc_cli/pipeline.py, ``_resumable``) where it paid for a new render, and the
        row names the paid call whatever became of the run. Kept whole, a signed URL's query
        too (it must be fetchable); never shown by a command."""
        with self.tx(sync_on_commit=True):
            self.db.execute(
                "UPDATE attempts SET answer_url = ?,"
                " provider_request_id = COALESCE(provider_request_id, ?),"
                " usage_json = COALESCE(?, usage_json)"
                " WHERE job_id = ? AND provider = ? AND number = ? AND status = 'started'",
                (
                    url,
                    request_id_kept(request_id),
                    _dumps(scrub_data(usage_kept(usage))) if usage else None,
                    job["id"],
                    provider,
                    number,
                ),
            )
            if cost_micros is not None:
                self.hold_known_cost(job, number, provider, cost_micros, cost_source)
            # the job holds its output key as one whose provider renders a request does
            # (``_rendering``): a run stopped or killed during the download leaves it so, and
            # another job of the key waits for it (``_check_output``); left ``queued`` (or
            # ``running`` under a dead process) it held nothing, and another batch's job of
            # the key paid for a render and stored it, this paid render never fetched
            self._rendering(job, provider, None, at_url=True)

    def set_attempt_inputs(
        self, job: dict[str, Any], number: int, provider: str, inputs: list[dict[str, Any]]
    ) -> None:
        """The reference images an attempt sends (with their SHA-256), on its row."""
        with self.tx():
            self.db.execute(
                "UPDATE attempts SET inputs_json = ? WHERE job_id = ? AND provider = ?"
                " AND number = ?",
                (_dumps(inputs), job["id"], provider, number),
            )

    def settle_ready_blocked(
        self, batch: str | None = None, limit: int = 1000, failed: list | None = None
    ) -> int:
        """Settle the blocked jobs none of whose needs is still unfinished (each need
        succeeded, ended badly or is missing): ``queued``, or failed with DEPENDENCY_FAILED
        (``settle_blocked``, one transaction each). ``afc worker`` claims only active jobs, so
        its claims call this first; a job whose need is still being worked on stays blocked
        for a later claim. Returns how many were settled; the jobs it failed are appended to
        ``failed`` (their batch, key and error message): the worker says each and counts
        them, as 'afc resume' does the jobs its run fails so."""
        open_needs = _in((*ACTIVE, "blocked", "awaiting_review"))
        where, params = _claim_scope(batch, "j.status = 'blocked'", f"j.batch{self.CODE_POINT}")
        sql = (
            f"SELECT j.id FROM jobs j WHERE {where}"
            " AND NOT EXISTS (SELECT 1 FROM job_needs n JOIN jobs d ON d.id = n.need_id"
            f" WHERE n.job_id = j.id AND d.status IN {open_needs})"
            f" ORDER BY j.batch{self.CODE_POINT}, j.seq LIMIT ?"
        )
        rows = self._all(sql, [*params, limit])
        settled = 0
        for row in rows:
            # the jobs this look failed, not those another process failed since the read
            # above (another worker's look of the same jobs, a rejection's walk): each was
            # said and counted by every worker that met it so, and a worker that failed none
            # exited 1 (test_audit42a_settle_counted_once)
            failed_here: list[str] = []
            status = self.settle_blocked(row["id"], failed_here)[0]
            if status != "blocked":
                settled += 1
            if failed_here and failed is not None:
                job = self.job(row["id"])
                if job is not None and job["error_code"] == "DEPENDENCY_FAILED":
                    failed.append(
                        {"batch": job["batch"], "key": job["key"], "error": job["error_message"]}
                    )
        return settled

    # --- the pictures (afc report --html, afc serve: afc_cli/web/sheet.py) -------------------

    # The contact sheet's columns of ``j`` (a job row, or a page of them: ``sheet_rows``); the
    # model of a replayed output found stored (``avoided``) is read apart (``_stored_models``)
    _SHEET_SQL = (
        "SELECT j.id, j.key, j.batch, j.status, j.step, j.request_json, j.output_key,"
        " j.output_sha256, j.output_size, j.error_code, j.error_message, j.waiting_reason,"
        " j.updated_at, b.storage, " + ANSWERED_SQL + ", " + JOB_COST_SQL + ","
        # the model that made the output (else the last one tried), with its place in the chain
        # after a tab (a literal tab in the string: both engines take it)
        " (SELECT a.provider || '/' || a.model || '\t' || a.chain_index FROM attempts a"
        "  WHERE a.job_id = j.id"
        "  ORDER BY CASE WHEN a.status = 'succeeded' THEN 1 ELSE 0 END DESC, a.number DESC"
        "  LIMIT 1) AS tried"
        " FROM {jobs} JOIN batches b ON b.name = j.batch"
    )
    # job ids a query of ``_stored_models`` names at once (under SQLite's oldest limit of 999)
    _IDS_AT_ONCE = 500

    @staticmethod
    def _sheet_where(
        batch: str | None, since_ts: float | None, statuses: tuple[str, ...] | None
    ) -> tuple[str, list[Any]]:
        where, params = ["1 = 1"], []
        if batch is not None or statuses:
            # with statuses, every batch is named too, so that they are looked up in the
            # (batch, status) index (_batch_scope): afc serve's failures page read every job
            # row of the ledger to find the failed ones
            scope, params = _batch_scope(batch, "j.batch")
            where.append(scope)
        if since_ts is not None:
            where.append("j.updated_at >= ?")
            params.append(since_ts)
        if statuses:
            where.append(f"j.status IN ({', '.join('?' for _ in statuses)})")
            params.extend(statuses)
        return " AND ".join(where), params

    def _stored_models(self, job_ids: list[str]) -> dict[str, str]:
        """The model that made the stored output each of these jobs found (its latest
        ``avoided`` row of reason ``stored``), by job id: one read of ``avoided`` per
        ``_IDS_AT_ONCE`` jobs, in m025's index ``avoided_job`` (job_id, id). A subquery per
        job read the whole table for each job: over 10,000 jobs and the 7,000 replay rows of
        one more submit of their manifest, a page of ``afc serve`` took 4.5 s; then each
        chunk still read the whole table (``afc report --html`` of a 10,000-job batch among
        317,000 rows: 10.5 s of SQLite, 1.5 s of PostgreSQL)."""
        found: dict[str, str] = {}
        for start in range(0, len(job_ids), self._IDS_AT_ONCE):
            chunk = job_ids[start : start + self._IDS_AT_ONCE]
            rows = self.db.execute(
                "SELECT job_id, provider || '/' || model FROM avoided"
                f" WHERE reason = 'stored' AND job_id IN ({', '.join('?' for _ in chunk)})"
                " ORDER BY at, id",
                chunk,
            ).fetchall()
            found.update((job_id, model) for job_id, model in rows)  # the latest last
        return found

    def sheet_rows(
        self,
        *,
        batch: str | None = None,
        since_ts: float | None = None,
        statuses: tuple[str, ...] | None = None,
        limit: int | None = None,
        offset: int = 0,
        job_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """Jobs as the contact sheet shows them (with their storage, cost, and the model that
        made the output), in the batch's order; ``changed since`` is ``updated_at``.

        A page (``limit``) is cut from the jobs before their attempts are read: the attempts
        of the page's jobs only, not of every job of the ledger sorted and then cut."""
        if job_id is not None:
            rows = self._all(self._SHEET_SQL.format(jobs="jobs j") + " WHERE j.id = ?", [job_id])
        else:
            where, params = self._sheet_where(batch, since_ts, statuses)
            if limit is None:
                jobs = "jobs j"
            else:  # the page's job ids (sorted without their rows), then their rows
                jobs = (
                    f"(SELECT j.id FROM jobs j WHERE {where} ORDER BY j.batch{self.CODE_POINT}, j.seq"
                    " LIMIT ? OFFSET ?) page JOIN jobs j ON j.id = page.id"
                )
                where = "1 = 1"
                params += [limit, offset]
            rows = self._all(
                self._SHEET_SQL.format(jobs=jobs)
                + f" WHERE {where} ORDER BY j.batch{self.CODE_POINT}, j.seq",
                params,
            )
        found = self._stored_models([row["id"] for row in rows])
        for row in rows:
            row["found"] = found.get(row["id"])
        return self.gone_calls(rows)

    def sheet_chunks(
        self, *, batch: str | None = None, since_ts: float | None = None
    ) -> Iterator[list[dict[str, Any]]]:
        """``sheet_rows`` of the scope, a chunk at a time (``_stream``): ``afc report --html``
        writes its contact sheet as it is read."""
        where, params = self._sheet_where(batch, since_ts, None)
        sql = (
            self._SHEET_SQL.format(jobs="jobs j")
            + f" WHERE {where} ORDER BY j.batch{self.CODE_POINT}, j.seq"
        )
        for rows in self._stream(sql, params):
            found = self._stored_models([row["id"] for row in rows])
            for row in rows:
                row["found"] = found.get(row["id"])
            yield self.gone_calls(rows)

    def sheet_counts(
        self, *, batch: str | None = None, since_ts: float | None = None
    ) -> dict[str, int]:
        """Jobs of the contact sheet's scope by status."""
        where, params = self._sheet_where(batch, since_ts, None)
        rows = self.db.execute(
            f"SELECT j.status, COUNT(*) FROM jobs j WHERE {where} GROUP BY j.status"
            " ORDER BY j.status",
            params,
        ).fetchall()
        return {status: int(count) for status, count in rows}

    def awaited_needs(
        self, batch: str | None = None
    ) -> dict[str, list[tuple[str, str | None, str | None]]]:
        """For each blocked job (of ``batch``, or the ledger), the keys of the needs it still
        waits for (not succeeded) with their status and error code, in one query: what ``afc
        status`` says it waits for, or that one of them ended badly (an 'afc retry' of the job
        alone), which the next run fails it for."""
        sql = (
            "SELECT n.job_id, n.need_key, d.status, d.error_code"
            " FROM job_needs n JOIN jobs j ON j.id = n.job_id"
            " LEFT JOIN jobs d ON d.id = n.need_id WHERE j.status = 'blocked'"
            " AND (d.status IS NULL OR d.status <> 'succeeded')"
        )
        params: list[Any] = []
        if batch is not None:
            sql += " AND j.batch = ?"
            params.append(batch)
        awaited: dict[str, list[tuple[str, str | None, str | None]]] = {}
        order = f" ORDER BY n.job_id, n.need_key{self.CODE_POINT}"
        for job_id, key, status, code in self.db.execute(sql + order, params):
            awaited.setdefault(job_id, []).append((key, status, code))
        return awaited

    def stores_to_retry(self, job_ids: list[str]) -> list[tuple[str, str]]:
        """Of ``job_ids``, the jobs resting at their store step whose storage failed in an
        earlier run (``store_failures``), each with its batch, in their order: their renders
        are paid for, in a spool, and a run tries their uploads before it pays for another
        render of their batch (``pipeline.note_stores_first``); one a killed run held
        (``running``) too. One query (``_among``)."""
        found = dict(
            self._among(
                job_ids,
                " AND j.status IN ('waiting', 'queued', 'running') AND j.step = 'store'"
                " AND j.store_failures > 0",
                "j.id, j.batch",
            )
        )
        return [(job_id, found[job_id]) for job_id in dict.fromkeys(job_ids) if job_id in found]

    def _among(self, job_ids: list[str], condition: str, columns: str = "j.id") -> list[Any]:
        """The rows (``columns``, the job's id first) of the jobs ``j`` of ``job_ids`` meeting
        ``condition`` (SQL on ``j``, from its ' AND'), one query. Up to ``IN_CHUNK`` of them (a
        worker's claim, a small submit) are looked up by id; more (a resume of a catalogue)
        through the ledger's jobs meeting it, every batch named (``_batch_scope``), kept when
        they are of these."""
        if not job_ids:
            return []
        if len(job_ids) <= IN_CHUNK:
            any_of, params = self._any_of("j.id", job_ids)
            return self.db.execute(
                f"SELECT {columns} FROM jobs j WHERE {any_of}{condition}", params
            ).fetchall()
        wanted = set(job_ids)
        every_batch, _ = _batch_scope(None, "j.batch")
        rows = self.db.execute(
            f"SELECT {columns} FROM jobs j WHERE {every_batch}{condition}"
        ).fetchall()
        return [row for row in rows if row[0] in wanted]

    def _blocked_among(self, job_ids: list[str], condition: str = "") -> list[str]:
        """Which of ``job_ids`` are blocked jobs ``j`` meeting ``condition`` (SQL on ``j``;
        none: every blocked job), one query (``_among``): up to ``IN_CHUNK`` of them kept in
        their order. Looked up by id for a few ids, not through every blocked job of the
        ledger: a busy worker's every claim (``run._fed``) read every blocked job of the
        ledger to find none of its own: 48 ms a claim beside 100,000 shots behind a style
        frame awaiting review, 25 times the claim itself (a worker draining 3,000 instant jobs
        beside them: 9.7 s, now 7.4 s; 6.1 s with no blocked jobs in the ledger)."""
        rows = self._among(job_ids, f" AND j.status = 'blocked'{condition}")
        if len(job_ids) > IN_CHUNK:
            return [row[0] for row in rows]
        found = {row[0] for row in rows}
        return [job_id for job_id in dict.fromkeys(job_ids) if job_id in found]

    def ready_blocked(self, job_ids: list[str]) -> list[str]:
        """Which of these jobs are blocked with no need left unfinished (each succeeded, ended
        badly or is missing: ``settle_ready_blocked``'s rule), one query: a submit's or
        resume's jobs whose needs a person decided while the run went on (``run.run_jobs``)."""
        open_needs = _in((*ACTIVE, "blocked", "awaiting_review"))
        return self._blocked_among(
            job_ids,
            " AND NOT EXISTS (SELECT 1 FROM job_needs n JOIN jobs d ON d.id = n.need_id"
            f" WHERE n.job_id = j.id AND d.status IN {open_needs})",
        )

    def parked_blocked(self, job_ids: list[str]) -> list[str]:
        """Which of these jobs are blocked with every need succeeded or awaiting review, at
        least one awaiting it (one query): nothing a run does settles them, only a person's
        decision (``settle_blocked`` would find them blocked, waiting for needs no run
        renders). A need missing, or ended badly, fails the job at its settling: not one of
        these; nor is a job with a need still to run or blocked in turn."""
        return self._blocked_among(
            job_ids,
            " AND EXISTS (SELECT 1 FROM job_needs n JOIN jobs d ON d.id = n.need_id"
            "  WHERE n.job_id = j.id AND d.status = 'awaiting_review')"
            " AND NOT EXISTS (SELECT 1 FROM job_needs n LEFT JOIN jobs d ON d.id = n.need_id"
            "  WHERE n.job_id = j.id"
            "  AND (d.id IS NULL OR d.status NOT IN ('succeeded', 'awaiting_review')))",
        )

    def blocked_job_ids(self, job_ids: list[str]) -> list[str]:
        """Which of these jobs are blocked on their needs (one query for a run's jobs)."""
        return self._blocked_among(job_ids)

    def _card_holders(self, batch: str, now: float) -> list[str]:
        """The live afc processes that hold jobs of ``batch`` ('pid N on HOST'): a run loop
        reads the batches' rate cards as it begins (``run.batch_rates``) and prices and
        reserves by them to its end (an ``afc worker``'s round likewise, its next round
        reading them anew), so a card a re-submit corrects under them applies from their
        next run; ``admit`` says so (README "Rate cards")."""
        from afc_cli.owner import held_by_no_process, lease_held, process_named

        holders: set[str] = set()
        for owner, expires, mono in self.db.execute(
            "SELECT DISTINCT lease_owner, lease_expires, lease_mono FROM jobs WHERE batch = ?"
            " AND lease_owner IS NOT NULL AND status IN ('queued', 'running', 'waiting')",
            (batch,),
        ):
            # as a claim judges it: a live process of this host by its monotonic expiry
            if held_by_no_process(owner) or not lease_held(owner, expires, now, mono):
                continue
            holders.add(process_named(owner))
        return sorted(holders)

    def _cards_still_called(self, batch: str, dropped: list[str]) -> list[str]:
        """Of the cards ('provider/model') a re-submit dropped, those whose model is in the
        chain of a job of ``batch`` not yet succeeded (one to render, or one a retry can put
        back): a batch moved to another model, its card taken out with the model once every
        job on it had rendered, was said to go unpriced from now on, asking whether
        AFC_CONFIG was unset, where no attempt to come calls that model."""
        left = set(dropped)
        called: set[str] = set()
        for (request_json,) in self.db.execute(
            "SELECT request_json FROM jobs WHERE batch = ? AND status <> 'succeeded'", (batch,)
        ):
            for entry in json.loads(request_json or "{}").get("chain") or ():
                card = f"{entry.get('provider')}/{entry.get('model')}"
                if card in left:
                    called.add(card)
                    left.discard(card)
            if not left:
                break
        return [card for card in dropped if card in called]

    def stored_output_keys(self, batch: str, limit: int) -> list[str]:
        """The output keys of ``batch``'s first ``limit`` stored outputs, in the batch's order
        (``run.hold_folder`` looks for them in a folder it is to record)."""
        rows = self.db.execute(
            "SELECT output_key FROM jobs WHERE batch = ? AND status IN (?, ?, ?)"
            " AND output_sha256 IS NOT NULL ORDER BY seq LIMIT ?",
            (batch, *RENDERED, limit),
        )
        return [row[0] for row in rows.fetchall()]

    def largest_output(self, batches: Collection[str]) -> int:
        """The largest output the jobs of ``batches`` have stored, in bytes (0 for none): what
        a run counts each render in flight at before it has spooled one itself
        (``pipeline._disk_low``)."""
        if not batches:
            return 0
        where, params = self._any_of("batch", batches)
        row = self.db.execute(f"SELECT MAX(output_size) FROM jobs WHERE {where}", params)
        return int(row.fetchone()[0] or 0)

    def stored_output(self, job_id: str) -> dict[str, Any] | None:
        """A job's stored output: its key, SHA-256, size, status, request hash and its batch's
        storage."""
        return self._one(
            "SELECT j.id, j.key, j.batch, j.status, j.request_hash, j.request_json,"
            " j.output_key, j.output_sha256, j.output_size, b.storage"
            " FROM jobs j JOIN batches b ON b.name = j.batch WHERE j.id = ?",
            (job_id,),
        )


def other_endpoint(
    batch: str, storage: str, recorded: str | None, endpoint: str | None
) -> str | None:
    """Why a batch's S3 storage cannot be used through ``endpoint`` (``storage.endpoint_of``,
    this environment's), when it was admitted through another (``recorded``,
    ``batches.storage_endpoint``); None when it can (either unknown, or the same)."""
    if endpoint is None or recorded is None or endpoint == recorded:
        return None

    def named(value: str) -> str:
        return f"the endpoint {value}" if value else "AWS's own endpoint"

    return (
        f"batch {batch!r} stores its outputs in {shown_url(storage)} through "
        f"{named(recorded)}, and this environment reaches it through {named(endpoint)} "
        "(AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL); a batch keeps the storage it "
        "was first admitted with, so no output is rendered twice into two places. "
        + (
            f"Set AWS_ENDPOINT_URL_S3={recorded}"
            if recorded
            else "Unset AWS_ENDPOINT_URL_S3 and AWS_ENDPOINT_URL"
        )
        + ", or use a new batch name."
    )


def read_admitted(
    ledger_path: str, batch: str, models: Collection[tuple[str, str]] = ()
) -> tuple[str | None, str | None, dict, dict, str | None, dict, list, tuple]:
    """A batch's storage and the S3 endpoint it was admitted through (None: unknown), its
    jobs (key: request hash, status, body, review, attempts, lease owner and expiry (on this
    host's clock: a PostgreSQL server's expiry is re-based on it), waiting reason, output key,
    inputs and the lease's expiry on its host's monotonic clock), their needs (key: need keys),
    where ``afc ledger copy`` moved the ledger's work (None: nowhere), the attempts of its
    unfinished jobs (``admitted_history``), the priced answers of ``models`` in the batch
    (``priced_answers_of``) and the ``file://`` folder mark recorded on the batch with its
    host (``Ledger.mark_folder``; None, None: none) as ``afc plan`` needs them,
    read without writing anything (no migrations, no lock)."""
    return backend(ledger_path).read_admitted(ledger_path, batch, models)


def spool_root_of(ledger_path: Any) -> Any:
    """Where the runs of this ledger on this host spool their paid renders (``afc plan``)."""
    return backend(ledger_path).spool_root_of(ledger_path)


def spool_holder_of(ledger_path: Any, job_ids: Collection[str]) -> tuple[str | None, str, set]:
    """``Ledger.read_spool_holder`` of the ledger ``ledger_path`` names (``afc plan``)."""
    return backend(ledger_path).read_spool_holder(ledger_path, job_ids)


# the most of a provider's id for a call the ledger keeps (job-style ids, which afc polls by,
# are 200 characters at most: ``providers.http.request_id_of``)
MAX_REQUEST_ID_CHARS = 1000


def request_id_kept(value: str | None) -> str | None:
    """A provider's id for a call as the ledger keeps it. A synchronous provider's id is its
    answer's to say (Gemini's ``responseId``, OpenAI's ``x-request-id``): scrubbed (it may
    quote the key), its control characters as ``\\xNN`` (a NUL in a paid answer's id made
    PostgreSQL refuse the attempt's row: the run ended in 'unexpected error', the render paid
    and lost), and cut to ``MAX_REQUEST_ID_CHARS``."""
    if value is None:
        return None
    return visible(scrub(value[: 2 * MAX_REQUEST_ID_CHARS]))[:MAX_REQUEST_ID_CHARS]


def admitted_storage(
    conn: Any, batch: str, mark: str
) -> tuple[str | None, str | None, tuple[str | None, str | None]]:
    """A batch's storage, recorded S3 endpoint and folder mark with its host
    (``read_admitted``), on a ledger opened read-only: one before m012 (not migrated) has no
    endpoint, one before m028 no mark."""
    cursor = conn.execute(f"SELECT * FROM batches WHERE name = {mark}", (batch,))
    row = cursor.fetchone()
    if row is None:
        return None, None, (None, None)
    found = dict(zip([d[0] for d in cursor.description], row, strict=True))
    marked = (found.get("storage_mark"), found.get("storage_mark_host"))
    return found["storage"], found.get("storage_endpoint"), marked


def moved_to(conn: Any) -> str | None:
    """``Ledger.moved_to``'s destination on a bare connection (``read_admitted``)."""
    row = conn.execute(LAST_MOVE_SQL).fetchone()
    return row[0] if row else None


def priced_answers_of(
    conn: Any, batch: str, models: Collection[tuple[str, str]], mark: str, source: str
) -> list[tuple]:
    """``Ledger.priced_answers`` on a connection whose parameter mark is ``mark``, reading
    the attempts of a batch through ``source`` (the engine's ``BATCH_ATTEMPTS``): also on a
    bare connection (``read_admitted``, for ``afc plan``)."""
    rows = []
    for provider, model in sorted(models):
        rows += conn.execute(
            f"SELECT a.provider, a.model, a.usage_json, j.request_json FROM {source}"
            f" WHERE j.batch = {mark} AND a.provider = {mark} AND a.model = {mark}"
            " AND a.cost_micros > 0 AND a.usage_json IS NOT NULL",
            (batch, provider, model),
        ).fetchall()
    return rows


def admitted_history(conn: Any, batch: str, mark: str) -> dict[str, list[dict[str, Any]]]:
    """The attempts since its last ``afc retry`` of each unfinished job of ``batch`` that has
    made any, oldest first, by key, on a bare connection (``read_admitted``): what the run
    decides a job's next model by (``attempts.next_try``), which ``afc plan`` prices. A job
    a budget stopped as its chain fell back to a dearer model was priced by its first."""
    history: dict[str, list[dict[str, Any]]] = {}
    cursor = conn.execute(
        "SELECT j.key, a.number, a.chain_index, a.status, a.error_class, a.provider, a.model,"
        " a.http_status, a.error_message, a.retry_after_s FROM attempts a"
        f" JOIN jobs j ON j.id = a.job_id WHERE j.batch = {mark} AND j.attempts > 0"
        f" AND a.number > j.attempt_base AND j.status NOT IN {TERMINAL_SQL}"
        " ORDER BY a.job_id, a.number",
        (batch,),
    )
    names = [d[0] for d in cursor.description]
    for row in cursor:
        found = dict(zip(names, row, strict=True))
        history.setdefault(found.pop("key"), []).append(found)
    return history


def admitted_needs(conn: Any, batch: str, mark: str) -> dict[str, tuple[str, ...]]:
    """``Ledger.batch_needs`` on a bare connection (``read_admitted``; ``mark``: the
    driver's parameter mark)."""
    needs: dict[str, list[str]] = {}
    for key, need in conn.execute(
        "SELECT j.key, n.need_key FROM job_needs n JOIN jobs j ON j.id = n.job_id"
        f" WHERE j.batch = {mark}",
        (batch,),
    ):
        needs.setdefault(key, []).append(need)
    return {key: tuple(sorted(keys)) for key, keys in needs.items()}
