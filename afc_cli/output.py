"""One output helper: the same rows as a rich table, JSON or CSV; and progress reporters.

stdout carries results only (a table, or with ``--json`` one JSON document and nothing else);
progress and messages go to stderr.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Sequence
from typing import Any

from afc_cli.costs import job_cost
from afc_cli.run import Reporter
from afc_cli.secrets import scrub


def emit_json(value: Any) -> None:
    sys.stdout.write(scrub(json.dumps(value, indent=2, sort_keys=False)) + "\n")


def emit_csv(rows: list[dict[str, Any]], columns: Sequence[str]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({c: "" if row.get(c) is None else scrub(row.get(c)) for c in columns})
    sys.stdout.write(buffer.getvalue())


def emit_table(
    rows: list[dict[str, Any]],
    columns: Sequence[str],
    *,
    title: str | None = None,
    footer: str | None = None,
) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_lines=False)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*("" if row.get(c) is None else scrub(str(row.get(c))) for c in columns))
    console = Console()
    console.print(table)
    if footer:
        console.print(footer)


def job_json(row: dict[str, Any]) -> dict[str, Any]:
    """A job as ``afc status --json`` shows it; money is a decimal string or null."""
    unpriced = row.get("unpriced_attempts") or 0
    error = None
    if row.get("error_code") or row.get("error_message"):
        error = {
            "code": row.get("error_code"),
            "class": row.get("error_class"),
            "message": row.get("error_message"),
        }
    return {
        "key": row["key"],
        "batch": row["batch"],
        "status": row["status"],
        "step": row["step"],
        "output_key": row["output_key"],
        "attempts": row["attempts"],
        "cost": job_cost(row.get("cost_micros"), unpriced),
        "unpriced_attempts": unpriced,
        "waiting": row.get("waiting_reason"),
        "error": error,
    }


class LineReporter(Reporter):
    """Plain log lines on stderr, for cron logs and pipes."""

    def __init__(self, verbose: bool = False):
        self.verbose = verbose

    def event(self, job: dict[str, Any], event: str, detail: str) -> None:
        if event == "ended" or self.verbose:
            sys.stderr.write(scrub(f"afc: {job['batch']}/{job['key']}: {event} {detail}") + "\n")
            sys.stderr.flush()


class RichReporter(Reporter):
    """A progress bar on a terminal."""

    def __init__(self, verbose: bool = False):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        self.verbose = verbose
        self.progress = Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self.task = None

    def begin(self, total: int) -> None:
        self.progress.start()
        self.task = self.progress.add_task("rendering", total=total)

    def event(self, job: dict[str, Any], event: str, detail: str) -> None:
        detail = scrub(detail)
        if event == "ended" and self.task is not None:
            self.progress.advance(self.task)
            if detail not in ("succeeded",):
                self.progress.console.print(f"{job['batch']}/{job['key']}: {detail}")
        elif self.verbose:
            self.progress.console.print(f"{job['batch']}/{job['key']}: {event} {detail}")

    def end(self) -> None:
        self.progress.stop()
