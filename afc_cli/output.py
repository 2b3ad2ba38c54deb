"""One output helper: the same rows as a rich table, JSON or CSV; and progress reporters.

stdout carries results only (a table, or with ``--json`` one JSON document and nothing else);
progress and messages go to stderr.
"""

from __future__ import annotations

import csv
import io
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from afc_cli.costs import job_cost
from afc_cli.jsonout import emit_json  # noqa: F401 - here for every command that imports it
from afc_cli.run import Reporter
from afc_cli.secrets import scrub


def emit_csv(rows: list[dict[str, Any]], columns: Sequence[str]) -> None:
    """``rows`` as CSV on stdout, each line ended by '\n' as afc's other output is. The csv
    writer's default '\r\n' left a '\r' in the last column (``row`` of ``afc costs report
    --csv``, the one that tells the total apart) for the line tools a script uses (``awk -F,
    '$NF == "total"'`` found no total row); CSV readers take either ending."""
    buffer = io.StringIO()
    writer = csv.DictWriter(
        buffer, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n"
    )
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
    from rich.table import Table

    from afc_cli.tables import rich_console

    table = Table(title=title, show_lines=False)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*("" if row.get(c) is None else scrub(str(row.get(c))) for c in columns))
    console = rich_console()
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
        "cost": job_cost(row.get("cost_micros"), row.get("attempts_made") or 0),
        "unpriced_attempts": unpriced,
        "waiting": row.get("waiting_reason"),
        "error": error,
    }


def stopping_message(grace_s: float, in_flight: int, why: str | None = None) -> str:
    # ``--grace inf`` waits for every call in flight however long it takes
    wait = "with no limit" if grace_s == float("inf") else f"up to {grace_s:g}s"
    return (
        f"stopping{f' ({why})' if why else ''}: no new provider calls; waiting {wait} "
        f"for {in_flight} job(s) in a call or in their storage work (press Ctrl-C "
        "again to abandon them)"
    )


def abandoning_message(why: str, in_flight: int, storing: int = 0) -> str:
    """``storing`` of the ``in_flight`` jobs are in their storage work: their calls were
    answered and recorded with their cost, their renders are in the spool (an S3 upload that
    hangs); said apart, not as calls recorded unknown, which the run's last line denied."""
    calls = in_flight - storing
    if not storing:
        return (
            f"{why}: abandoning {in_flight} job(s) still in flight (their calls are recorded "
            "as unknown: possibly paid)"
        )
    return (
        f"{why}: abandoning {in_flight} job(s) still in flight: "
        + (f"{calls} in a call (recorded as unknown: possibly paid), " if calls else "")
        + f"{storing} in their storage work (their renders are recorded with their cost and "
        "kept in the spool: the next run stores them)"
    )


class LineReporter(Reporter):
    """Plain log lines on stderr, for cron logs and pipes."""

    def __init__(self, verbose: bool = False):
        self.verbose = verbose

    def stopping(self, grace_s: float, in_flight: int, why: str | None = None) -> None:
        self.state(stopping_message(grace_s, in_flight, why))

    def abandoning(self, why: str, in_flight: int, storing: int = 0) -> None:
        self.state(abandoning_message(why, in_flight, storing))

    def event(self, job: dict[str, Any], event: str, detail: str, **info: Any) -> None:
        if event == "ended" or self.verbose:
            sys.stderr.write(scrub(f"afc: {job['batch']}/{job['key']}: {event} {detail}") + "\n")
            sys.stderr.flush()

    def state(self, message: str | None) -> None:
        if message:
            sys.stderr.write(f"afc: {message}\n")
            sys.stderr.flush()

    def notice(self, message: str) -> None:
        sys.stderr.write(scrub(f"afc: {message}") + "\n")
        sys.stderr.flush()


class RichReporter(Reporter):
    """A small live panel on a terminal (stderr): a bar, then succeeded / failed / waiting /
    in flight / queued, the spend against the budget, the rate and ETA, and why jobs wait and
    when they try next. Failures are printed above it as they happen, one line each, and a
    message that repeats (up to its figures) is shown once. The figures are
    ``afc_cli/progress.py``'s; a run-wide state (``state("draining: 12s left")``) is shown
    under them until cleared with ``state(None)``.
    """

    def __init__(self, verbose: bool = False):
        from afc_cli.tables import rich_console

        self.verbose = verbose
        self.console = rich_console(stderr=True, highlight=False)
        self.progress = None
        self.live = None
        self.draining_until: float | None = None  # set while a stopping run drains

    def begin(self, total: int, *, cap_micros: int | None = None) -> None:
        from rich.live import Live

        from afc_cli.progress import RunProgress

        self.progress = RunProgress(total, cap_micros)
        self.live = Live(
            get_renderable=self._render,
            console=self.console,
            refresh_per_second=4,
            transient=False,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self.live.start()

    def _render(self):
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        progress = self.progress
        if progress is None:
            return Text("")
        if self.draining_until is not None:
            left = max(0.0, self.draining_until - time.monotonic())
            progress.state(
                f"draining: {left:.0f}s left for the calls in flight (Ctrl-C again abandons them)"
            )
        head = progress.head()
        bar = Table.grid(padding=(0, 1))
        bar.add_column(no_wrap=True)
        bar.add_column(ratio=1)
        bar.add_column(no_wrap=True)
        bar.add_row(
            Text("rendering", style="bold"),
            ProgressBar(total=max(progress.total, 1), completed=progress.finished),
            Text(head),
        )
        return Group(bar, *(Text(line) for line in progress.lines()))

    def _flush(self) -> None:
        if self.progress is None or self.live is None:
            return
        from rich.text import Text

        for message in self.progress.take():
            self.live.console.print(Text(message, style="red" if " failed: " in message else ""))

    def event(self, job: dict[str, Any], event: str, detail: str, **info: Any) -> None:
        if self.progress is None:
            return
        detail = scrub(detail)
        self.progress.event(job, event, detail, **info)
        if self.verbose and self.live is not None:
            from rich.text import Text

            self.live.console.print(Text(f"{job['batch']}/{job['key']}: {event} {detail}"))
        if event == "ended":
            self._flush()

    def state(self, message: str | None) -> None:
        if self.progress is not None:
            self.progress.state(message)

    def notice(self, message: str) -> None:
        """Above the panel, where it stays."""
        from rich.text import Text

        (self.live.console if self.live is not None else self.console).print(Text(scrub(message)))

    def stopping(self, grace_s: float, in_flight: int, why: str | None = None) -> None:
        """Say so above the panel, and count the grace period down under it (each redraw)."""
        if self.live is not None:
            self.live.console.print(stopping_message(grace_s, in_flight, why))
        self.draining_until = time.monotonic() + grace_s

    def abandoning(self, why: str, in_flight: int, storing: int = 0) -> None:
        self.draining_until = None
        if self.live is not None:
            self.live.console.print(abandoning_message(why, in_flight, storing))
        self.state("abandoning what is still in flight")

    def exiting(self) -> None:
        """Show the cursor the panel hid, on the terminal itself and without waiting for it:
        the process exits at once, and a terminal paused (Ctrl-S) would hold a write for
        ever, so it is written non-blocking (dropped if the terminal takes nothing now)."""
        if self.live is None or not self.console.is_terminal:
            return
        import fcntl

        fd = self.console.file.fileno()
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
        try:
            os.write(fd, b"\r\n\x1b[?25h")
        except OSError:
            pass
        finally:
            fcntl.fcntl(fd, fcntl.F_SETFL, flags)  # the file is the shell's too

    def end(self) -> None:
        if self.live is not None:
            self._flush()
            self.live.refresh()
            self.live.stop()
            self.live = None
