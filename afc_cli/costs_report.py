"""``afc costs report``: spend from the ledger, grouped, with unpriced never shown as zero.

For each group: ``priced`` (the sum of known attempt costs), ``unpriced_attempts`` (attempts
whose cost is unknown: real spend is higher than ``priced`` by their cost), ``failed_spend``
(known cost of attempts that failed or whose outcome is unknown), ``unknown_attempts``
(attempts whose answer afc never got: a process ended during the call, or the provider no
longer had the request when a run came back for it; possibly paid), ``avoided_renders``
(renders a stored output made unnecessary: a replay of a finished job, or an output found in
storage) and ``avoided_cost`` (what those would have cost: the original render's cost, else
the rate card; ``avoided_unpriced`` counts the ones neither knows). Each job's avoided render
counts once, at the first time it was avoided, however often the job is replayed afterwards
(ledgers written before afc counted it once may hold a row per replay: the report takes each
job's first).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from afc_cli.costs import format_usd, plural
from afc_cli.errors import UsageError
from afc_cli.ledger import Ledger

GROUPS = ("provider", "model", "batch", "day")
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


def costs_report(
    ledger_path: str, *, batch: str | None, since: str | None, by: str
) -> dict[str, Any]:
    return costs_reports(ledger_path, batch=batch, since=since, bys=(by,))[by]


def costs_reports(
    ledger_path: str, *, batch: str | None, since: str | None, bys: tuple[str, ...]
) -> dict[str, dict[str, Any]]:
    """``costs_report`` of each grouping of ``bys``, from one read of the ledger's attempts
    (``Ledger.cost_groupings``): ``afc serve``'s spend page and ``afc report --html`` show
    three."""
    for by in bys:
        if by not in GROUPS:
            raise UsageError(f"--by takes one of {', '.join(GROUPS)}, got {by!r}")
    since_ts = parse_since(since)
    ledger = Ledger(ledger_path, create=False, reading=True)
    try:
        ledger.require_batch(batch)
        groupings = ledger.cost_groupings(bys, batch=batch, since=since_ts)
        moved = ledger.moved_to()
    finally:
        ledger.close()
    # where 'afc ledger copy' moved the ledger's work: its spend from then on is there
    moved_to = moved["destination"] if moved else None
    return {by: _report(by, groupings[by], moved_to) for by in bys}


def _report(by: str, groups: dict[Any, dict[str, int]], moved_to: str | None) -> dict[str, Any]:
    for values in groups.values():
        for name in FIELDS:
            values.setdefault(name, 0)

    total = dict.fromkeys(FIELDS, 0)
    rows = []
    for key in sorted(groups, key=lambda k: (k is None, str(k))):
        values = groups[key]
        for name in FIELDS:
            total[name] += values[name]
        rows.append({by: key, **_shown(values)})
    return {"by": by, "rows": rows, "total": _shown(total), "moved_to": moved_to}


def _shown(values: dict[str, int]) -> dict[str, Any]:
    return {name: format_usd(values[name]) if name in MONEY else values[name] for name in FIELDS}


def footer(report: dict[str, Any]) -> str | None:
    total = report["total"]
    notes = []
    unpriced, unknown, avoided = (
        total["unpriced_attempts"],
        total["unknown_attempts"],
        total["avoided_unpriced"],
    )
    if unpriced:
        notes.append(
            f"{plural(unpriced, 'attempt')} {'is' if unpriced == 1 else 'are'} unpriced: real "
            "spend is higher than shown."
        )
    if unknown:
        notes.append(
            f"{plural(unknown, 'attempt')} {'has' if unknown == 1 else 'have'} an unknown "
            "outcome (afc never saw the call end: a process ended during the call or during "
            "its output's download, or the provider no longer had the request): the provider "
            "may have charged for "
            f"{'it' if unknown == 1 else 'them'}."
        )
    if avoided:
        notes.append(
            f"{plural(avoided, 'avoided render')} {'has' if avoided == 1 else 'have'} no "
            "known price."
        )
    return "\n".join(notes) or None
