"""``afc status`` and ``afc outputs``: what the ledger says about jobs and what they made."""

from __future__ import annotations

import json
from typing import Any

from afc_cli.costs import plural
from afc_cli.errors import UsageError, first_named
from afc_cli.ledger import ACTIVE, TERMINAL, Ledger
from afc_cli.ledger.core import NEED_FAILED
from afc_cli.owner import held_by_no_process
from afc_cli.owner import process_gone as owner_process_gone
from afc_cli.storage import object_path, object_url

STATUSES = (*ACTIVE, "blocked", "awaiting_review", *TERMINAL)
# Shown without --all: what a person may have to act on. Everything but the quiet states, so a
# status added later (a review gate, a blocked job) is shown rather than hidden.
QUIET = ("succeeded", "queued", "cancelled")
# The order rows that need attention are listed in: the most urgent first.
URGENCY = ("dead", "failed", "waiting", "running")


def _reason(job: dict[str, Any]) -> str | None:
    """Why a job is where it is: its error (code and message) or what it waits for."""
    error = job.get("error")
    if error:
        return ": ".join(part for part in (error.get("code"), error.get("message")) if part)
    return job.get("waiting")


# A running (or waiting) job whose afc process ended without finishing it: killed (SIGKILL, an
# OOM kill, a reboot), or a host whose lease ran out. Nothing runs it until a run takes it over
PROCESS_GONE = (
    "the afc process running it is gone (killed?): the next afc resume or afc worker takes it over"
)


def process_gone(job: dict[str, Any], now: float) -> bool:
    """Whether ``job``'s lease is held by a process that is gone: dead on this host, or its
    lease expired (another host's that stopped renewing it): ``owner.process_gone``, the rule
    the money follows too. A free job has no process to be gone, and a host's spool hold and
    a moved ledger's lease are held by no process and say so in their own words."""
    owner = job.get("lease_owner")
    if owner is None or held_by_no_process(owner):
        return False
    return owner_process_gone(owner, job.get("lease_expires"), now, job.get("lease_mono"))


# the start of the reason a run writes of a job that waits for its provider's call slot
# (``slot_wait_reason``): a wait inside that run
SLOT_WAIT = "waiting for a call of "
# said after it once no process holds the job: the run stopped (Ctrl-C, a budget) while it
# waited, and the slot's wait ended with it
SLOT_WAIT_OVER = (
    "no afc process waits for it now (its run ended during the wait): the next afc resume or "
    "afc worker calls it"
)


# the starts of the other reasons a run writes of a wait it makes itself: a job's backoff
# between attempts, and its looks at an output key another job is rendering
# (``backoff_reason``, ``output_wait_reason``)
BACKOFF_WAIT = "backoff "
OUTPUT_WAIT = "output key "
OUTPUT_RENDERED = " is being rendered by job "


def run_wait(said: str) -> bool:
    """Whether a job's reason is of a wait that ends with the run that makes it
    (``waiting_now``). Not the budget's: its reason is written as the run gives the job up,
    and says what a person must change; nor a wait for a job that holds the output key with
    a paid render no run works on (``OutputHeld``), which waits for no run."""
    if said.startswith((SLOT_WAIT, BACKOFF_WAIT)):
        return True
    return said.startswith(OUTPUT_WAIT) and OUTPUT_RENDERED in said


def slot_wait_reason(provider: str, why: str) -> str:
    """The reason a run writes of a job waiting for a call slot of ``provider`` (``why``: the
    limit that holds it), which ``waiting_now`` reads back by its start."""
    return f"{SLOT_WAIT}{provider} to end: {why}"


def backoff_reason(wait_s: float, after: str) -> str:
    """The reason a run writes of a job waiting out its backoff after an attempt that ended
    ``after`` (an error class), which ``waiting_now`` reads back by its start."""
    return f"{BACKOFF_WAIT}{wait_s:.2f}s after {after}"


def output_wait_reason(output_key: str, key: str, batch: str) -> str:
    """The reason a run writes of a job that waits while job ``key`` of ``batch`` renders its
    output key (``OutputBusy``), which ``waiting_now`` reads back by its start."""
    return f"{OUTPUT_WAIT}{output_key}{OUTPUT_RENDERED}{key!r} of batch {batch!r}"


def waiting_now(job: dict[str, Any], said: str | None, now: float) -> str | None:
    """A job's reason (``said``: what the ledger has, ``waiting_reason``), with the word that
    its process is gone where it is (``process_gone``), or that no process waits any more for
    what its run waited for (``SLOT_WAIT_OVER``: a provider's call slot, a backoff, an output
    key's render): as ``afc status`` and ``afc show`` give it."""
    if job["status"] in ("running", "waiting") and process_gone(job, now):
        return f"{said}; {PROCESS_GONE}" if said else PROCESS_GONE
    if (
        job["status"] == "waiting"
        and said
        and run_wait(said)
        and "lease_owner" in job
        and job["lease_owner"] is None
    ):
        # a run stopped while the job waited for its slot leaves it free, 'waiting for a
        # call of local to end: its limits allow 1 at once': a call no process makes, in a
        # run that has ended, read as a job held back by a call still going on. So did one
        # stopped in the job's backoff, 'backoff 60.00s after rate_limited', a wait no
        # process waits out (the next run decides its own), read as one under way
        return f"{said}; {SLOT_WAIT_OVER}"
    return said


def paused_for(
    job: dict[str, Any],
    awaited: dict[str, list[tuple[str, str | None, str | None]]],
    batched: bool = False,
) -> str | None:
    """What a blocked job waits for (its needs not yet succeeded: ``Ledger.awaited_needs``)
    and what a job awaiting review waits for: ``afc status`` showed them with no reason, where
    the run's summary said why. ``batched``: the ledger has several batches, so the commands
    it names (a review, the retry of a need that ended badly) name the batch too (a key of
    several batches without --batch is refused, exit 2: the command said was one a person
    could not run as said)."""

    def named(key: str) -> str:
        return f"{key} --batch {job['batch']}" if batched else key

    if job["status"] == "awaiting_review":
        from afc_cli.review import command

        batch_option = [f"--batch {job['batch']}"] if batched else []
        return (
            f"awaiting a person's review: {command('approve', job['key'], *batch_option)} "
            "(or reject)"
        )
    if job["status"] == "blocked":
        awaited_here = awaited.get(job["id"]) or []
        # a need that ended badly (the job retried alone): "waiting for" it said the job
        # could still run, where the next run fails it at once, as 'afc retry' said
        ended = [need for need in awaited_here if need[1] in NEED_FAILED]
        if ended:
            key, status, code = ended[0]
            if code == "DEPENDENCY_FAILED":
                # failed for a job it needs in turn: a retry of it alone puts it back behind
                # that job, which still ended badly, and the next run fails both again
                # (``Ledger._fail_dependency`` says the same of the need itself)
                return (
                    f"its need '{key}' ended {status}, itself DEPENDENCY_FAILED: the next run"
                    " fails it (DEPENDENCY_FAILED); a retry of the job that ended badly"
                    f" ('afc show {named(key)}' names it) puts '{key}' and this job back"
                )
            fix = (
                "a rejected job is final"
                if status == "rejected"
                else f"'afc retry {named(key)}' lets it run"
            )
            return (
                f"its need '{key}' ended {status}: the next run fails it (DEPENDENCY_FAILED); {fix}"
            )
        needs = [key for key, _status, _code in awaited_here]
        if needs:
            return f"waiting for {plural(len(needs), 'need')}: {first_named(needs, 3)}"
        # every need succeeded (a style frame approved since the last run): a run settles it
        return BLOCKED_NEEDS_MET
    return None


BLOCKED_NEEDS_MET = "its needs have succeeded: the next 'afc resume' (or an 'afc worker') runs it"


def paused_reasons(book: Ledger, rows: list[dict[str, Any]]) -> dict[str, str]:
    """What ``afc status --json`` says the jobs of ``rows`` (a run's) that await a review or
    are blocked wait for (``paused_for``), by job id: a submit's or resume's ``--json`` lists
    the same jobs, and gave ``waiting`` null for them."""
    paused = [r for r in rows if r["status"] in PAUSED and not r.get("waiting_reason")]
    if not paused:
        return {}
    batches = {r["batch"] for r in paused}
    scope = next(iter(batches)) if len(batches) == 1 else None
    awaited = book.awaited_needs(scope) if any(r["status"] == "blocked" for r in paused) else {}
    batched = len(book.batches()) > 1
    return {r["id"]: paused_for(r, awaited, batched) or "" for r in paused}


PAUSED = ("awaiting_review", "blocked")


def parse_statuses(values: list[str] | None) -> list[str] | None:
    """``--status failed --status dead`` or ``--status failed,dead``; None when not given."""
    if not values:
        return None
    wanted = [part.strip() for value in values for part in value.split(",") if part.strip()]
    if not wanted:  # an unset shell variable, most likely: not "every status"
        raise UsageError(f"--status {values[0]!r} names no status; one of {', '.join(STATUSES)}")
    unknown = [name for name in wanted if name not in STATUSES]
    if unknown:
        raise UsageError(
            f"--status {', '.join(unknown)}: not a job status; one of {', '.join(STATUSES)}"
        )
    return wanted


def status_view(
    ledger_path: str,
    *,
    batch: str | None,
    statuses: list[str] | None = None,
    everything: bool = False,
    stream: bool = False,
) -> dict[str, Any]:
    """Counts by status over the batch (or ledger), and the jobs to show.

    ``jobs`` holds every job of the scope, or those with one of ``statuses``; ``attention``
    says whether the table should show only the jobs that need a person (no filter and no
    ``everything``: failed, dead-lettered, waiting, running, in that order), and then
    ``jobs`` holds those alone (the others are in ``counts``). ``stream``: ``jobs`` is an
    iterator of them, read from the ledger a chunk at a time as it is taken (``afc status
    --json`` writes each as it comes: every job of a ledger of 100,000 was held, 350 MB), the
    ledger closed once it is done."""
    wanted = parse_statuses(statuses)
    attention = wanted is None and not everything
    book = Ledger(ledger_path, create=False, reading=True)
    try:
        # the counts and the rows streamed after them, of one moment: a run's commit between
        # the two made a document whose counts disagreed with its jobs
        book.read_one_moment()
        book.require_batch(batch)
        # the counts from the (batch, status) index, and the rows of the jobs shown alone:
        # every job of a ledger grown over months was read, each with its cost, to list the
        # few that need attention (410,000 jobs: 7 s and 650 MB)
        grouped = book.status_counts(batch)
        if wanted is not None:
            shown: tuple[str, ...] | None = tuple(wanted)
        elif attention:
            shown = tuple(s for s in STATUSES if s not in QUIET)
        else:
            shown = None
        awaited = book.awaited_needs(batch)
        counts: dict[str, int] = {}
        for _batch, status, count in grouped:
            counts[status] = counts.get(status, 0) + count
        paused = counts.get("awaiting_review") or counts.get("blocked")
        batched = bool(paused) and len(book.batches()) > 1
        now = book.lease_clock()
        moved = book.moved_to()
        jobs = _status_jobs(book, book.status_chunks(batch, shown), awaited, batched, now)
        if not stream:
            jobs = list(jobs)  # read whole, the ledger closed below
    except BaseException:
        book.close()
        raise
    batches = sorted({name for name, _status, _count in grouped})
    return {
        "jobs": jobs,
        "counts": counts,
        "attention": attention,
        "batches": batches,
        # where 'afc ledger copy' moved its work (its unfinished jobs run there), or None
        "moved_to": moved["destination"] if moved else None,
    }


def _status_jobs(
    book: Ledger,
    chunks: Any,
    awaited: dict[str, list[tuple[str, str | None, str | None]]],
    batched: bool,
    now: float,
) -> Any:
    """The rows of ``status_view``, a chunk of the ledger's at a time; ``book`` is closed
    once they are read (or the reading stops)."""
    from afc_cli.output import job_json

    try:
        for raw in chunks:
            for job in raw:
                row = job_json(job)
                row["waiting"] = waiting_now(job, row["waiting"], now) or paused_for(
                    job, awaited, batched
                )
                row["reason"] = _reason(row)
                yield row
    finally:
        book.close()


def needing_attention(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows a person may have to act on, the most urgent first (stable within a status)."""

    def rank(row: dict[str, Any]) -> int:
        status = row["status"]
        return URGENCY.index(status) if status in URGENCY else len(URGENCY)

    return sorted((row for row in rows if row["status"] not in QUIET), key=rank)


def counts_line(counts: dict[str, int], batch: str | None = None) -> str:
    """``12 jobs: 9 succeeded, 1 failed, 2 waiting``: outcomes first, then work left."""
    total = sum(counts.values())
    known = ("succeeded", "failed", "dead", "waiting", "running", "queued", "cancelled")
    order = [s for s in known if s in counts] + sorted(set(counts) - set(known))
    parts = ", ".join(f"{counts[s]} {s}" for s in order)
    scope = f"batch {batch}: " if batch else ""
    return f"{scope}{total} job{'s' if total != 1 else ''}" + (f": {parts}" if parts else "")


def outputs(ledger_path: str, *, batch: str | None) -> list[dict[str, Any]]:
    """Stored outputs, for handing to an edit suite: key, where the file is (a local path for
    ``file://`` storage, and a URL for every storage), size, SHA-256, the job's cost (the same
    rule as ``afc status``), the model that made it and the prompt."""
    return list(each_output(ledger_path, batch=batch))


def each_output(ledger_path: str, *, batch: str | None) -> Any:
    """``outputs``, an iterator read from the ledger a chunk at a time as it is taken (``afc
    outputs --json`` writes each as it comes: the 100,000 outputs of a ledger grown over
    months were held, 460 MB). The batch is checked at once, before the first is taken."""
    book = Ledger(ledger_path, create=False, reading=True)
    try:
        book.require_batch(batch)
    except BaseException:
        book.close()
        raise
    return _outputs_of(book, batch)


def output_storages(ledger_path: str, *, batch: str | None) -> dict[str, str]:
    """The batches of ``outputs`` (those with a succeeded job) and their storage URLs, read
    from the batches' rows: what ``afc outputs`` lays its table out by, before its rows."""
    book = Ledger(ledger_path, create=False, reading=True)
    try:
        book.require_batch(batch)
        return book.output_storages(batch)
    finally:
        book.close()


def _outputs_of(book: Ledger, batch: str | None) -> Any:
    from afc_cli.costs import job_cost

    try:
        for rows in book.output_chunks(batch):
            for row in rows:
                yield _output(row, job_cost)
    finally:
        book.close()


def _output(row: dict[str, Any], job_cost: Any) -> dict[str, Any]:
    request = json.loads(row["request_json"]) if row["request_json"] else {}
    return {
        "key": row["key"],
        "batch": row["batch"],
        "output_key": row["output_key"],
        "path": object_path(row["storage"], row["output_key"]),
        "url": object_url(row["storage"], row["output_key"]),
        "size": row["output_size"],
        "sha256": row["output_sha256"],
        "cost": job_cost(row["cost_micros"], row["attempts_made"] or 0),
        # its attempts of unknown cost, left out of ``cost`` (as ``afc status``)
        "unpriced_attempts": row["unpriced_attempts"] or 0,
        "model": row["model"],
        "prompt": request.get("prompt"),
    }
