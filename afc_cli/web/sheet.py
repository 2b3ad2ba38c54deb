"""What the pictures show, read from the ledger: every job as a card of the contact sheet,
the failures with their cause, the jobs awaiting review, and the spend.

The spend is ``afc costs report``'s own computation (``afc_cli/costs_report.py``) grouped by
provider, by model and by day, so the report's figures are the costs report's figures. A
job's cost and attempts are ``afc status``'s (the sum of its priced attempts; unpriced when it
had attempts and none is priced).

``since`` (an ISO date or time, as in ``afc costs report --since``) keeps the jobs that changed
since then, and the attempts and avoided renders since then for the spend.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from afc_cli.costs import job_cost
from afc_cli.costs_report import costs_reports, parse_since
from afc_cli.ledger import Ledger
from afc_cli.ledger.core import moved_line
from afc_cli.listing import waiting_now
from afc_cli.storage import object_url

# A job that failed in a way a person must look at.
FAILED = ("failed", "dead")
# Jobs whose output is stored (a job awaiting review has passed verify: its output is there).
STORED = ("succeeded", "awaiting_review")
SPEND_GROUPS = ("provider", "model", "day")


def _card(row: dict[str, Any], now: float) -> dict[str, Any]:
    request = json.loads(row["request_json"]) if row["request_json"] else {}
    chain = [f"{c['provider']}/{c['model']}" for c in request.get("chain", [])]
    model, fallback = None, False
    if row["tried"]:
        model, _, index = row["tried"].partition("\t")
        fallback = index not in ("", "0")
    elif row["found"]:
        model = row["found"]
    error = None
    if row["error_message"]:
        error = ": ".join(p for p in (row["error_code"], row["error_message"]) if p)
    has_output = row["status"] in STORED and row["output_sha256"] is not None
    return {
        "id": row["id"],
        "key": row["key"],
        "batch": row["batch"],
        "status": row["status"],
        "step": row["step"],
        "prompt": request.get("prompt") or "",
        "chain": chain,
        "model": model,
        "fallback": fallback,
        "attempts": row["attempts"],
        "cost": job_cost(row["cost_micros"], row["attempts_made"] or 0),
        "unpriced_attempts": row["unpriced_attempts"] or 0,
        "storage": row["storage"],
        "output_key": row["output_key"],
        "output_url": object_url(row["storage"], row["output_key"]),
        "output": has_output,
        "size": row["output_size"],
        "sha256": row["output_sha256"],
        "error": error,
        # as afc status and afc show give it: with the word that its process is gone
        "waiting": waiting_now(row, row["waiting_reason"], now),
        "updated_at": row["updated_at"],
    }


def cards(
    ledger: Ledger,
    *,
    batch: str | None = None,
    since_ts: float | None = None,
    statuses: tuple[str, ...] | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> list[dict[str, Any]]:
    """The jobs of the scope as cards, in the batch's order."""
    rows = ledger.sheet_rows(
        batch=batch, since_ts=since_ts, statuses=statuses, limit=limit, offset=offset
    )
    now = ledger.lease_clock()
    return [_card(row, now) for row in rows]


def card(ledger: Ledger, job_id: str) -> dict[str, Any] | None:
    rows = ledger.sheet_rows(job_id=job_id)
    return _card(rows[0], ledger.lease_clock()) if rows else None


def counts(ledger: Ledger, *, batch: str | None = None, since_ts: float | None = None):
    """Jobs of the scope by status."""
    return ledger.sheet_counts(batch=batch, since_ts=since_ts)


# keys a cause of the failures lists beside its count (the rest are in the list below it)
CAUSE_KEYS = 5
# causes the table shows, the commonest first; the others are counted under it (their
# failures are in the list below it): 10,000 failures of 10,000 causes (a provider's message
# naming its request id) were a table of 10,000 rows above a list paged at 120
CAUSE_ROWS = 20
# the words of a message a key may be (a key's alphabet: letters, digits, . _ - :)
_WORDS = re.compile(r"[\w.:-]+")


def _cause_of(job: dict[str, Any]) -> str:
    """What failures of one cause share: the text up to the job's own key and up to its
    figures (``progress.same_message``, as a run's summary groups its lines). afc's messages
    name the job they are about ("restore it, then 'afc retry shot-0001'"), so grouped by
    their exact text, one palette file gone was a cause per job."""
    from afc_cli.progress import same_message

    text = job["error"] or job["waiting"] or "(no cause recorded)"
    key = job["key"]
    if key in text:  # the key as a word of its own, not inside another ('shot-1' in 'shot-10')
        text = _WORDS.sub(lambda word: "\x00" if word[0] == key else word[0], text)
    return same_message(text)


def causes(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The failures grouped by their cause (``_cause_of``), the commonest first, each said as
    its first failure says it: 1,000 failures of three causes are three lines to read, not
    1,000."""
    groups: dict[str, dict[str, Any]] = {}
    for job in jobs:
        said = job["error"] or job["waiting"] or "(no cause recorded)"
        group = groups.setdefault(_cause_of(job), {"cause": said, "count": 0, "keys": []})
        group["count"] += 1
        if len(group["keys"]) < CAUSE_KEYS:
            group["keys"].append(job["key"])
    return sorted(groups.values(), key=lambda g: (-g["count"], g["cause"]))


def spend(ledger_path: str, *, batch: str | None, since: str | None) -> dict[str, Any]:
    """``afc costs report`` by provider, by model and by day: the same rows and totals, from
    one read of the attempts (``costs_reports``)."""
    return costs_reports(ledger_path, batch=batch, since=since, bys=SPEND_GROUPS)


def sheet(ledger_path: str, *, batch: str | None, since: str | None) -> dict[str, Any]:
    """Everything the report file shows (the whole scope: the file pages it itself)."""
    since_ts = parse_since(since)
    book = Ledger(ledger_path, create=False, reading=True)
    try:
        book.require_batch(batch)
        jobs = cards(book, batch=batch, since_ts=since_ts)
        batches = [row["name"] for row in book.batches()]
    finally:
        book.close()
    by_status: dict[str, int] = {}
    for job in jobs:
        by_status[job["status"]] = by_status.get(job["status"], 0) + 1
    from afc_cli.ledger.postgres import display_url

    return {
        # as afc serve and every message name it: a PostgreSQL URL's password masked
        "ledger": display_url(ledger_path),
        "batch": batch,
        "batches": [batch] if batch else batches,
        "since": since,
        "generated_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "jobs": jobs,
        "counts": by_status,
        "failures": [job for job in jobs if job["status"] in FAILED],
        "review": [job for job in jobs if job["status"] == "awaiting_review"],
        "spend": spend(ledger_path, batch=batch, since=since),
    }


# what the report says under its header of a ledger 'afc ledger copy' moved (``moved_line``)
MOVED_THERE = "its jobs run and are decided there; this report shows its history up to the move"


def streamed_sheet(
    ledger_path: str, *, batch: str | None, since: str | None
) -> tuple[dict[str, Any], Any]:
    """``sheet`` without its ``jobs``, and an iterator of them read from the ledger a chunk at
    a time (the ledger closed once it is done): ``afc report --html`` of a ledger of months
    held every card, its thumbnail and the whole text at once (100,000 jobs: 516 MiB). The
    counts are the ledger's (``sheet_counts``), the failures and the jobs awaiting review
    read on their own, in the same order."""
    since_ts = parse_since(since)
    book = Ledger(ledger_path, create=False, reading=True)
    try:
        book.require_batch(batch)
        batches = [row["name"] for row in book.batches()]
        by_status = book.sheet_counts(batch=batch, since_ts=since_ts)
        failures = cards(book, batch=batch, since_ts=since_ts, statuses=FAILED)
        review = cards(book, batch=batch, since_ts=since_ts, statuses=("awaiting_review",))
        now = book.lease_clock()
        chunks = book.sheet_chunks(batch=batch, since_ts=since_ts)
        moved = book.moved_to()
    except BaseException:
        book.close()
        raise

    def jobs() -> Any:
        try:
            for rows in chunks:
                for row in rows:
                    yield _card(row, now)
        finally:
            book.close()

    from afc_cli.ledger.postgres import display_url

    data = {
        "ledger": display_url(ledger_path),
        "batch": batch,
        "batches": [batch] if batch else batches,
        "since": since,
        "generated_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "job_count": sum(by_status.values()),
        "counts": by_status,
        "failures": failures,
        "review": review,
        "spend": spend(ledger_path, batch=batch, since=since),
        # where 'afc ledger copy' moved its work (said under the report's header): a report
        # mailed from the old ledger showed jobs queued and awaiting review that are run and
        # decided in the new one, as if it were the batch's state
        "moved_to": moved["destination"] if moved else None,
        "moved": None if moved is None else moved_line(moved["destination"], MOVED_THERE),
    }
    return data, jobs()
