"""Review gates: jobs with ``review: true`` pause in ``awaiting_review`` after verify, their
output stored, until a person approves (-> ``succeeded``) or rejects (-> ``rejected``,
terminal) them. The ``afc review`` commands and the review page of ``afc serve`` call these.

A decision is one transaction (``Ledger.decide_reviews``): the status change, guarded by the
status it leaves (``WHERE status = 'awaiting_review'``), the decision row with who made it,
when and why, the job's event and its webhook row (``job.succeeded`` / ``job.rejected``). Of
two people approving one job at once, one decision is recorded and the other is refused.
Several keys in one call are decided all together or not at all. A rejection fails the jobs
that need the rejected one (``DEPENDENCY_FAILED``) in the same transaction.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import threading
from typing import Any

from afc_cli.errors import (
    AfcError,
    LedgerWriteError,
    StorageError,
    UsageError,
    batch_key_hint,
    several_batches,
    unwritten,
)
from afc_cli.ledger import Ledger, ReviewRace
from afc_cli.storage import object_url


class OutputChanged(UsageError):
    """A decision named the output it is about (``--sha256``, a review page's card) and the
    job awaits review with another one now (rendered again since: cancelled or rejected,
    retried): nothing was decided (exit 2). ``key``, ``batch``, ``given`` and ``now`` (the
    SHA-256 the job's output has now). ``owner`` (batch and key) names another job whose
    output ``given`` is: a script that passed one key's sha256 with another key was told the
    job had been "rendered again since", sending its person to look for a render that never
    happened. So was a person who mistyped a sha256: with ``renders`` (the job's attempts
    that rendered) one, ``given`` cannot be an earlier render of the job, and is said as
    no job's output."""

    def __init__(
        self,
        verb: str,
        key: str,
        batch: str,
        given: str,
        now: str | None,
        owner: dict[str, Any] | None = None,
        renders: int = 2,
    ):
        if owner is not None and (owner["batch"], owner["key"]) != (batch, key):
            why = (
                f"it has SHA-256 {now}, and {given} is the output of another job, "
                f"{owner['batch']}/{owner['key']}: was that job's sha256 given with this key?"
            )
        elif renders <= 1:
            # none: its output was found in storage (stored by an earlier ledger), not rendered
            origin = "from its only render" if renders else "as found in its storage"
            why = f"it has SHA-256 {now}, {origin}, and {given} is no job's output (mistyped?)"
        else:
            why = f"it now has SHA-256 {now} (rendered again since)"
        super().__init__(
            f"cannot {verb} {key!r} (batch {batch!r}): its output is not the one this "
            f"decision is about (SHA-256 {given}); {why}; nothing was decided. Look at the "
            "output 'afc review list' shows now, then decide again with its sha256"
        )
        self.key, self.batch, self.given, self.now = key, batch, given, now


def command(verb: str, key: str, *options: str) -> str:
    """The command that decides on ``key`` (``verb``: approve or reject), as afc writes it for
    a person to run ('afc status', a report's card): ``options`` (``--batch B``, ``--sha256
    HEX``) after the key, and a key beginning with '-' (the key alphabet allows ``-take2``)
    after ``--``, the options before it. Written key first, such a key was read as options:
    the report's 'afc review approve -take2 --batch b --sha256 HEX' under the picture was exit
    2, 'No such option: -t'; a key that is one of the command's options (``--note``,
    ``-q``) took the words after it as its value, or was taken as the flag."""
    words = " ".join(options)
    if key.startswith("-"):
        return f"afc review {verb} {words + ' ' if words else ''}-- {key}"
    return f"afc review {verb} {key}{' ' + words if words else ''}"


def sha256_of(text: str) -> str:
    """A SHA-256 as given (``--sha256``, a form): 64 hexadecimal digits, lowercased, as
    ``afc review list --json`` writes them; else a UsageError."""
    value = text.strip().lower()
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise UsageError(
            f"--sha256 {text!r} is not a SHA-256 (64 hexadecimal digits): give the sha256 "
            "'afc review list --json' shows for the job"
        )
    return value


class NotDecided(AfcError):
    """The ledger could not take a decision (SQLite's write lock held past its busy timeout
    by another process, a full disk, a PostgreSQL connection lost): nothing of it was written
    (one transaction), and the same decision may be made again. Exit 1, as for any ledger
    that cannot be written; ``failed`` and ``fix`` say it in parts (``afc review`` adds the
    command to run again, ``afc serve`` shows the message)."""

    def __init__(self, failed: str, fix: str, then: str = "decide again"):
        super().__init__(
            f"{failed}; nothing was decided (a decision is one transaction; 'afc review list' "
            f"shows what still awaits one): {fix}, then {then}"
        )
        self.failed, self.fix = failed, fix


def pending(ledger: Ledger, batch: str | None = None, now: float | None = None) -> list[dict]:
    """Jobs awaiting review, oldest first: dicts with keys job_id, batch, key, model,
    output (the stored output's URI: file:// path or s3:// URL), sha256 (the stored
    output's: what a decision on it is about), cost_micros (int or None:
    the known attempt costs' sum), cost (the job's cost as ``afc status`` shows it:
    ``job_cost``, a known 0 for an output found in storage with no attempt),
    unpriced_attempts (those of unknown cost, not in it), age_s (float), prompt."""
    from afc_cli.costs import job_cost

    ledger.require_batch(batch)
    now = ledger.clock() if now is None else now  # the clock review_at is dated on
    out = []
    for row in ledger.review_rows(batch):
        try:
            prompt = json.loads(row["request_json"])["prompt"]
        except (ValueError, KeyError, TypeError):
            prompt = None
        out.append(
            {
                "job_id": row["id"],
                "batch": row["batch"],
                "key": row["key"],
                "model": row["model"],
                "output": object_url(row["storage"], row["output_key"]),
                "sha256": row["output_sha256"],
                "cost_micros": row["cost_micros"],
                "cost": job_cost(row["cost_micros"], row["attempts_made"] or 0),
                "unpriced_attempts": row["unpriced_attempts"] or 0,
                "age_s": max(0.0, now - (row["review_at"] or now)),
                "prompt": prompt,
            }
        )
    return out


def approve(
    ledger: Ledger,
    keys: list[str],
    *,
    by: str,
    note: str | None = None,
    batch: str | None = None,
    sha256: str | None = None,
) -> list[str]:
    """Approve jobs awaiting review; returns the keys decided. Raises an afc_cli.errors
    domain error (exit 2 class) naming the key if a key is unknown, ambiguous across batches
    without `batch`, or not awaiting review; in that case nothing is decided. ``sha256``:
    the SHA-256 of the output the decision is about (``pending``'s), with one key only; a job
    with another output now is refused (OutputChanged), checked in the decision's
    transaction. Each job's output is looked for in its storage first (``_gone``): an
    output deleted or cut short since it was verified is refused, nothing decided."""
    return _decide(
        ledger, keys, "approved", by=by, note=note, batch=batch, sha256=sha256, looked=True
    )[0]


def reject(
    ledger: Ledger,
    keys: list[str],
    *,
    by: str,
    reason: str,
    batch: str | None = None,
    sha256: str | None = None,
) -> tuple[list[str], int]:
    """Same contract; the job becomes `rejected` (terminal). Returns the keys decided and
    how many blocked jobs that needed them, directly or not, the rejection failed
    (DEPENDENCY_FAILED): a style frame's rejection fails the batch behind it."""
    if not reason or not reason.strip():
        raise UsageError("a rejection needs a reason (--reason TEXT): it is kept with the job")
    return _decide(ledger, keys, "rejected", by=by, note=reason, batch=batch, sha256=sha256)


def blocked_by(ledger: Ledger, keys: list[str], batch: str | None = None) -> int:
    """How many blocked jobs need one of these jobs (just decided: each key names one job),
    each counted once: what an approval lets run, said only when there is any."""
    blocked: set[str] = set()
    for key in dict.fromkeys(keys):
        for job in ledger.jobs_by_key(key, batch):
            blocked.update(
                d["id"] for d in ledger.dependents_of(job["id"]) if d["status"] == "blocked"
            )
    return len(blocked)


def approve_shown(
    ledger: Ledger,
    shown: list[tuple[str, str]],
    *,
    by: str,
    sha256: dict[tuple[str, str], str] | None = None,
) -> list[str]:
    """Approve the jobs a review page showed, as (batch, key) pairs (``afc serve``'s "approve
    all shown"; a page of a server of the whole ledger may hold several batches): all in one
    transaction or none, as ``approve``, naming each job that is no longer awaiting review
    (decided meanwhile, elsewhere). ``sha256``: (batch, key) -> the output shown, each
    checked in the transaction (OutputChanged). Returns the keys decided."""
    return _decide(ledger, shown, "approved", by=by, note=None, batch=None, expect=sha256)[0]


def _gone(ledger: Ledger, jobs: list[dict]) -> list[str]:
    """Why these jobs' outputs cannot be approved (``gone_each``), each reason once (one of
    a store reached through another endpoint than its batch's is said once for the batch)."""
    return list(dict.fromkeys(why for _, why in gone_each(ledger, jobs)))


def gone_each(ledger: Ledger, jobs: list[dict]) -> list[tuple[dict, str]]:
    """Each of these jobs whose output cannot be approved, with why: gone from its storage,
    or not of the size it was verified with (cut short, saved over). Approved, such a job was
    ``succeeded`` ("stored and verified") with nothing stored under its key: ``afc outputs``
    listed a file that is not there, the jobs needing it failed INPUT_UNAVAILABLE, and a
    succeeded job is never rendered again; before the approval, ``afc cancel`` and ``afc
    retry`` render it again under the same key. One look (a HEAD) per job, and a read of an
    object without afc's metadata (the verified bytes put back by another tool pass); a
    storage that cannot be reached stops the decision with its error (StorageError), nothing
    decided."""
    from afc_cli import storage as storages

    opened: dict[str, object] = {}
    elsewhere: dict[str, str | None] = {}  # batch -> why its store is not reached here
    gone: list[tuple[dict, str]] = []
    for job in jobs:
        url = (ledger.batch(job["batch"]) or {}).get("storage")
        if not url or not job["output_key"]:
            continue
        if job["batch"] not in elsewhere:
            # its bucket through another endpoint than the batch's (a reviewer's laptop
            # without the MinIO or R2 endpoint a run had): that store holds none of the
            # batch's outputs, and each was said "gone from storage", to be cancelled and
            # retried, where a run here is refused (Ledger.check_storage)
            try:
                ledger.check_storage(job["batch"], None, storages.endpoint_of(url))
                elsewhere[job["batch"]] = None
            except UsageError as exc:
                elsewhere[job["batch"]] = exc.message
        if elsewhere[job["batch"]] is not None:
            gone.append((job, elsewhere[job["batch"]]))
            continue
        if url not in opened:
            opened[url] = storages.open(url)
        store = opened[url]
        info = store.head(job["output_key"])
        where = store.describe(job["output_key"])
        size = job["output_size"]
        again = f"'afc cancel {job['key']}' then 'afc retry {job['key']}'"
        held = (info.meta or {}).get("sha256")
        sha = job["output_sha256"]
        root = getattr(store, "root", None)
        if not info.exists and root is not None and not root.is_dir():
            # the storage folder itself is not here (a share not mounted, a disk of another
            # machine): said gone, the advice to cancel and retry had a run make the folder
            # afresh on this machine and pay for the render again
            gone.append(
                (
                    job,
                    f"{job['key']!r}: its storage folder {root} is not there (a share not mounted "
                    "here, another machine's disk, or the folder deleted), so its output cannot be "
                    "looked for: approve where that folder is, or once it is mounted here (a run "
                    "here would make the folder afresh and pay for every render again); deleted, "
                    f"render it again: 'afc cancel {job['key']}' then 'afc retry {job['key']}'",
                )
            )
            continue
        if not info.exists:
            why = f"its output ({where}) is gone from storage"
        else:
            if size is not None and info.size is not None and info.size != size:
                why = f"its output ({where}) is {info.size} bytes, not the {size} it was verified with"
            # of its size, saved over: the metadata the same HEAD answered names what is there
            # (an S3 object another tool wrote has none of afc's; another afc output copied
            # over it, another SHA-256); a folder's file saved over in place keeps its
            # metadata beside it, and only reading it tells (the contact sheet's picture does)
            elif sha and info.meta is None:
                # the verified bytes put back by another tool (an 'aws s3 cp' of a copy: what
                # "restore the file" below asks of an output gone) carry none of afc's
                # metadata: read, they are the output verified, and approved as such (one GET,
                # for such an object only); a render again paid for them anew
                if size is not None and store.verify(job["output_key"], size, sha, None) is None:
                    continue
                why = f"its key ({where}) holds an object afc did not write (no afc metadata)"
            elif sha and held and held != sha:
                why = (
                    f"its key ({where}) holds another output (SHA-256 {held[:12]}…, not the "
                    f"{sha[:12]}… it was verified with)"
                )
            else:
                continue
            # still at the key: a retry alone takes it as the job's output found in storage
            # and, reading it back, fails (VERIFY_FAILED) or refuses it, rendering nothing;
            # deleted, it is rendered
            again = (
                f"delete {store.held_at(job['output_key'])}, then 'afc cancel {job['key']}' and "
                f"'afc retry {job['key']}' (a retry alone finds the object at its key and "
                "renders nothing)"
            )
        gone.append(
            (
                job,
                f"{job['key']!r}: {why}; approved, it would be succeeded with nothing of its "
                f"own stored. Restore the file, or render it again: {again}",
            )
        )
    return gone


def _back(job: dict) -> str:
    """How a job cancelled awaiting review (its step ``review``: its output verified and
    stored) comes back to its review: said with the refusal, which named no way (a reviewer
    deciding on it was told only "it is cancelled, not awaiting review")."""
    if job["status"] != "cancelled" or job.get("step") != "review":
        return ""
    return (
        f" (cancelled awaiting review: 'afc retry {job['key']}', then a run, puts it back to "
        "review, its output taken from storage while it is there, nothing paid again)"
    )


def _decide(
    ledger: Ledger,
    keys: list[str] | list[tuple[str, str]],
    decision: str,
    *,
    by: str,
    note: str | None,
    batch: str | None,
    sha256: str | None = None,
    expect: dict | None = None,
    looked: bool = False,
) -> tuple[list[str], int]:
    """The keys decided, and the blocked jobs a rejection failed (``reject``). ``keys``:
    job keys (of ``batch``, else of the one batch holding each), or (batch, key) pairs (``approve_shown``). ``sha256``: the output the decision is about, of one key;
    ``expect``: each named job's (``approve_shown``). ``looked``: each job's output is looked
    for in its storage before the decision (``_gone``; ``afc serve``'s "Approve the N
    shown" looks for those it approves itself, ``gone_each``, and leaves the ones gone
    undecided)."""
    verb = "approve" if decision == "approved" else "reject"
    if not keys:
        raise UsageError("name the jobs to decide (KEY...); 'afc review list' shows them")
    if sha256 is not None:
        sha256 = sha256_of(sha256)
        if len(dict.fromkeys(keys)) > 1:
            raise UsageError(
                f"--sha256 names the output of one job, and {len(keys)} keys were given: "
                f"{verb} each with its own --sha256 (one 'afc review {verb} KEY --sha256 "
                "HEX' per key); nothing was decided"
            )
        expect = {keys[0]: sha256}
    expect = expect or {}
    expected: dict[str, str] = {}
    if not by or not by.strip():
        raise UsageError("a decision names who made it (--by)")
    ledger.refuse_moved()  # a decision here would not reach the ledger its work moved to
    ledger.require_batch(batch)
    jobs, problems = [], []
    for named in dict.fromkeys(keys):
        of, key = named if isinstance(named, tuple) else (batch, named)
        found = ledger.jobs_by_key(key, of)
        where = f" in batch {of!r}" if of else ""
        label = repr(f"{of}/{key}" if isinstance(named, tuple) else key)
        if not found:
            problems.append(f"{label}: no job with this key{where}" + batch_key_hint(key))
        elif len(found) > 1:
            batches = several_batches([repr(job["batch"]) for job in found])
            problems.append(f"{label}: a key of several batches ({batches}): add --batch")
        elif found[0]["status"] != "awaiting_review":
            problems.append(
                f"{label}: it is {found[0]['status']}, not awaiting review" + _back(found[0])
            )
        else:
            jobs.extend(found)
            if expect.get(named) is not None:
                expected[found[0]["id"]] = expect[named]
    if looked and not problems:
        try:
            problems.extend(_gone(ledger, jobs))
        except StorageError as exc:
            # said as a decision not made, as a ledger that cannot take it is: the storage's
            # error alone ('cannot read s3://...: no AWS credentials found') left a reviewer
            # to wonder whether the approval went through
            raise NotDecided(
                exc.message,
                "once its storage can be read here (an approval looks for each output there first)",
            ) from None
    if problems:
        raise UsageError(
            f"cannot {verb}, nothing was decided:\n" + "\n".join(f"  - {p}" for p in problems)
        )
    # tests freeze here (as afc_cli/pipeline.py ``stall_point``, not imported for it): a job
    # rendered again between the reads above and the decision's transaction. Sent to this
    # thread: one sent to the process may be taken by another thread while this one runs on
    # into the transaction (afc serve decides in a thread pool)
    if "review_decide" in os.environ.get("AFC_STALL_POINT", "").split(","):
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
    try:
        failed = ledger.decide_reviews(jobs, decision, by=by, note=note, sha256=expected)
    except (sqlite3.OperationalError, LedgerWriteError) as exc:
        # said as what it is, not as a run's stop with 'afc resume' to run (which decides
        # nothing), nor as a traceback and a 500 on the review page. (A PostgreSQL connection
        # lost as its COMMIT went out may have recorded it: decided again, it is refused as
        # made, and 'afc review list' shows it.)
        written = unwritten(exc)
        if written is None:
            raise
        raise NotDecided(written.failed, written.fix) from None
    except ReviewRace as exc:
        if exc.expected is not None:
            owner = ledger.output_of(exc.expected)
            renders = ledger.renders_of(exc.batch, exc.key)
            raise OutputChanged(
                verb, exc.key, exc.batch, exc.expected, exc.now, owner, renders
            ) from None
        raise UsageError(
            f"cannot decide {exc.key!r} (batch {exc.batch!r}): it was decided meanwhile, by "
            "another review; nothing was decided"
        ) from None
    return [job["key"] for job in jobs], failed
