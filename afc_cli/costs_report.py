"""``afc costs report``: spend from the ledger, grouped, with unpriced never shown as zero.

For each group: ``priced`` (the sum of known attempt costs), ``unpriced_attempts`` (attempts
whose cost is unknown: real spend is higher than ``priced`` by their cost), ``failed_spend``
(known cost of attempts that failed or whose outcome is unknown), ``unknown_attempts``
(attempts a dead process left: possibly paid), ``avoided_renders`` (renders a stored output
made unnecessary: a replay of a finished job, or an output found in storage) and
``avoided_cost`` (what those would have cost: the original render's cost, else the rate card;
``avoided_unpriced`` counts the ones neither knows). Each job's avoided render counts once, at
the first time it was avoided, however often the job is replayed afterwards (ledgers written
before afc counted it once may hold a row per replay: the report takes each job's first).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from afc_cli.costs import format_usd
from afc_cli.errors import UsageError
from afc_cli.ledger import Ledger

GROUPS = {
    "provider": ("a.provider", "v.provider"),
    "model": ("a.provider || '/' || a.model", "v.provider || '/' || v.model"),
    "batch": ("j.batch", "v.batch"),
    "day": ("date(a.started_at, 'unixepoch')", "date(v.at, 'unixepoch')"),
}
MONEY = ("priced", "failed_spend", "avoided_cost")
COUNTS = ("unpriced_attempts", "unknown_attempts", "avoided_renders", "avoided_unpriced")
FIELDS = (
    "priced",
    "unpriced_attempts",
    "failed_spend",
    "unknown_attempts",
    "avoided_renders",
    "avoided_cost",
    "avoided_unpriced",
)


def parse_since(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        when = dt.datetime.fromisoformat(value)
    except ValueError:
        raise UsageError(f"--since takes an ISO date or time (2026-11-29), got {value!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def _filters(
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


def costs_report(
    ledger_path: str, *, batch: str | None, since: str | None, by: str
) -> dict[str, Any]:
    if by not in GROUPS:
        raise UsageError(f"--by takes one of {', '.join(GROUPS)}, got {by!r}")
    since_ts = parse_since(since)
    attempt_key, avoided_key = GROUPS[by]
    where, params = _filters("j.batch", "a.started_at", batch, since_ts)
    v_where, v_params = _filters("v.batch", "v.at", batch, since_ts)

    ledger = Ledger(ledger_path, create=False)
    try:
        ledger.require_batch(batch)
        groups: dict[Any, dict[str, int]] = {}

        def row_for(key: Any) -> dict[str, int]:
            return groups.setdefault(key, dict.fromkeys(FIELDS, 0))

        for key, priced, unpriced, failed, unknown in ledger.db.execute(
            f"SELECT {attempt_key}, COALESCE(SUM(a.cost_micros), 0),"
            " SUM(a.cost_micros IS NULL AND a.status != 'started'),"
            " COALESCE(SUM(CASE WHEN a.status IN ('failed', 'unknown') THEN a.cost_micros END), 0),"
            " SUM(a.status = 'unknown')"
            " FROM attempts a JOIN jobs j ON j.id = a.job_id"
            f" WHERE {' AND '.join(where)} GROUP BY 1",
            params,
        ):
            row = row_for(key)
            row.update(
                priced=priced,
                unpriced_attempts=unpriced or 0,
                failed_spend=failed,
                unknown_attempts=unknown or 0,
            )
        for key, count, cost, unpriced in ledger.db.execute(
            f"SELECT {avoided_key}, COUNT(*), COALESCE(SUM(v.cost_micros), 0),"
            " SUM(v.cost_micros IS NULL)"
            " FROM avoided v WHERE v.id IN (SELECT MIN(id) FROM avoided GROUP BY job_id)"
            f" AND {' AND '.join(v_where)} GROUP BY 1",
            v_params,
        ):
            row = row_for(key)
            row.update(avoided_renders=count, avoided_cost=cost, avoided_unpriced=unpriced or 0)
    finally:
        ledger.close()

    total = dict.fromkeys(FIELDS, 0)
    rows = []
    for key in sorted(groups, key=lambda k: (k is None, str(k))):
        values = groups[key]
        for name in FIELDS:
            total[name] += values[name]
        rows.append({by: key, **_shown(values)})
    return {"by": by, "rows": rows, "total": _shown(total)}


def _shown(values: dict[str, int]) -> dict[str, Any]:
    return {name: format_usd(values[name]) if name in MONEY else values[name] for name in FIELDS}


def footer(report: dict[str, Any]) -> str | None:
    total = report["total"]
    notes = []
    if total["unpriced_attempts"]:
        notes.append(
            f"{total['unpriced_attempts']} attempts are unpriced: real spend is higher than shown."
        )
    if total["unknown_attempts"]:
        notes.append(
            f"{total['unknown_attempts']} attempts have an unknown outcome (a process ended "
            "during them): the provider may have charged for them."
        )
    if total["avoided_unpriced"]:
        notes.append(f"{total['avoided_unpriced']} avoided renders have no known price.")
    return "\n".join(notes) or None
