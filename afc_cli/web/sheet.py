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
import time
from typing import Any

from afc_cli.costs import job_cost
from afc_cli.costs_report import costs_report, parse_since
from afc_cli.ledger import JOB_COST_SQL, Ledger

# A job that failed in a way a person must look at.
FAILED = ("failed", "dead")
# Jobs whose output is stored (a job awaiting review has passed verify: its output is there).
STORED = ("succeeded", "awaiting_review")
SPEND_GROUPS = ("provider", "model", "day")

_JOBS_SQL = (
    "SELECT j.id, j.key, j.batch, j.status, j.step, j.attempts, j.request_json, j.output_key,"
    " j.output_sha256, j.output_size, j.error_code, j.error_message, j.waiting_reason,"
    " j.updated_at, b.storage, " + JOB_COST_SQL + ","
    # the model that made the output (else the last one tried), with its place in the chain
    " (SELECT a.provider || '/' || a.model || char(9) || a.chain_index FROM attempts a"
    "  WHERE a.job_id = j.id ORDER BY a.status = 'succeeded' DESC, a.number DESC LIMIT 1)"
    " AS tried,"
    " (SELECT v.provider || '/' || v.model FROM avoided v WHERE v.job_id = j.id"
    "  AND v.reason = 'stored' ORDER BY v.at DESC LIMIT 1) AS found"
    " FROM jobs j JOIN batches b ON b.name = j.batch"
)


def _card(row: dict[str, Any]) -> dict[str, Any]:
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
        "cost": job_cost(row["cost_micros"], row["unpriced_attempts"] or 0),
        "unpriced_attempts": row["unpriced_attempts"] or 0,
        "storage": row["storage"],
        "output_key": row["output_key"],
        "output_url": f"{row['storage'].rstrip('/')}/{row['output_key']}",
        "output": has_output,
        "size": row["output_size"],
        "sha256": row["output_sha256"],
        "error": error,
        "waiting": row["waiting_reason"],
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
    where, params = _where(batch, since_ts, statuses)
    sql = f"{_JOBS_SQL} WHERE {where} ORDER BY j.batch, j.seq"
    if limit is not None:
        sql += " LIMIT ? OFFSET ?"
        params += [limit, offset]
    return [_card(row) for row in ledger._all(sql, params)]


def card(ledger: Ledger, job_id: str) -> dict[str, Any] | None:
    rows = ledger._all(f"{_JOBS_SQL} WHERE j.id = ?", [job_id])
    return _card(rows[0]) if rows else None


def counts(ledger: Ledger, *, batch: str | None = None, since_ts: float | None = None):
    """Jobs of the scope by status."""
    where, params = _where(batch, since_ts, None)
    return dict(
        ledger.db.execute(
            f"SELECT j.status, COUNT(*) FROM jobs j WHERE {where} GROUP BY 1 ORDER BY 1", params
        ).fetchall()
    )


def _where(
    batch: str | None, since_ts: float | None, statuses: tuple[str, ...] | None
) -> tuple[str, list[Any]]:
    where, params = ["1 = 1"], []
    if batch is not None:
        where.append("j.batch = ?")
        params.append(batch)
    if since_ts is not None:
        where.append("j.updated_at >= ?")
        params.append(since_ts)
    if statuses:
        where.append(f"j.status IN ({', '.join('?' for _ in statuses)})")
        params.extend(statuses)
    return " AND ".join(where), params


def spend(ledger_path: str, *, batch: str | None, since: str | None) -> dict[str, Any]:
    """``afc costs report`` by provider, by model and by day: the same rows and totals."""
    return {by: costs_report(ledger_path, batch=batch, since=since, by=by) for by in SPEND_GROUPS}


def sheet(ledger_path: str, *, batch: str | None, since: str | None) -> dict[str, Any]:
    """Everything the report file shows (the whole scope: the file pages it itself)."""
    since_ts = parse_since(since)
    book = Ledger(ledger_path, create=False)
    try:
        book.require_batch(batch)
        jobs = cards(book, batch=batch, since_ts=since_ts)
        batches = [row["name"] for row in book.batches()]
    finally:
        book.close()
    by_status: dict[str, int] = {}
    for job in jobs:
        by_status[job["status"]] = by_status.get(job["status"], 0) + 1
    return {
        "ledger": ledger_path,
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
