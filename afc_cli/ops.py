"""Operator commands: cancel jobs, and the queue figures cron alerts on."""

from __future__ import annotations

import operator
import re
from typing import Any

from afc_cli.errors import UsageError
from afc_cli.ledger import ACTIVE, Ledger

STAT_FIELDS = ("queued", "in_flight", "delayed", "dlq", "oldest_age_seconds")
_OPS = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    "<": operator.lt,
}
_CONDITION = re.compile(r"^\s*([a-z_]+)\s*(>=|<=|==|!=|>|<)\s*(\d+)\s*$")


def cancel(
    ledger_path: str, keys: list[str], batch: str | None, reason: str | None = None
) -> dict[str, list[dict[str, str]]]:
    """Cancel jobs by key (within --batch if given) or every unfinished job of a batch.

    A cancelled job is final: its status is written through the first-terminal-wins update,
    so a worker busy with it notices at its next step (or when its wait ends) and stops; a
    result that arrives after the cancel changes no status but is still recorded as paid.
    """
    if not keys and batch is None:
        raise UsageError("name the jobs to cancel (KEY...) or a whole batch (--batch B)")
    ledger = Ledger(ledger_path, create=False)
    out: dict[str, list[dict[str, str]]] = {"cancelled": [], "already_final": [], "not_found": []}
    try:
        if keys:
            targets = []
            for key in keys:
                found = ledger.jobs_by_key(key, batch)
                if not found:
                    out["not_found"].append({"key": key, "batch": batch})
                targets.extend(found)
            if out["not_found"]:
                # all or nothing: a mistyped key cancels no job (exit 2 means nothing written)
                where = f" in batch {batch!r}" if batch is not None else ""
                missing = ", ".join(repr(item["key"]) for item in out["not_found"])
                raise UsageError(
                    f"no such job{where}: {missing}; nothing was cancelled (check the keys "
                    "with 'afc status')"
                )
        else:
            if ledger.batch(batch) is None:
                raise UsageError(f"no batch {batch!r} in {ledger_path}")
            targets = [job for job in ledger.batch_jobs(batch) if job["status"] in ACTIVE]
        why = reason or "cancelled with afc cancel"
        for job in targets:
            entry = {"key": job["key"], "batch": job["batch"]}
            if ledger.cancel(job, why):
                out["cancelled"].append(entry)
                _cancel_at_provider(ledger, job)
            else:
                entry["status"] = ledger.job(job["id"])["status"]
                out["already_final"].append(entry)
    finally:
        ledger.close()
    return out


def _cancel_at_provider(ledger: Ledger, job: dict[str, Any]) -> None:
    """A job rendering on a job-style provider (Replicate, fal): ask it to stop too, so the
    render stops costing money. Whatever it reports later is still recorded."""
    import asyncio

    from afc_cli.providers import PROVIDERS

    for attempt in ledger.attempts(job["id"]):
        provider = PROVIDERS.get(attempt["provider"])
        if (
            attempt["status"] in ("started", "unknown")
            and attempt["provider_request_id"]
            and provider is not None
            and provider.resumable
        ):

            async def stop(provider=provider, attempt=attempt) -> None:
                try:
                    await provider.cancel(attempt["provider_request_id"], attempt["model"])
                finally:
                    await provider.close()

            try:
                asyncio.run(stop())
            except Exception:  # noqa: BLE001 - the cancel in the ledger stands regardless
                ledger.note(job, "provider_cancel_failed", request=attempt["provider_request_id"])
            else:
                ledger.note(job, "provider_cancel_sent", request=attempt["provider_request_id"])


def queue_stats(ledger_path: str) -> dict[str, Any]:
    ledger = Ledger(ledger_path, create=False)
    try:
        return ledger.queue_stats()
    finally:
        ledger.close()


def failed_conditions(stats: dict[str, Any], expressions: list[str]) -> list[str]:
    """The ``--fail-if`` conditions (``dlq>0``, ``oldest_age_seconds>=3600``; comma-separated
    or repeated) that hold for these figures."""
    met = []
    for expression in expressions:
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
            if _OPS[op](stats[field], int(number)):
                met.append(f"{field}={stats[field]} ({part.strip()})")
    return met
