"""The ``afc`` command: each command parses options, calls one library function, formats.

One error boundary (``_boundary``) turns domain errors into a message on stderr and their exit
code; no traceback reaches a user for an expected error. Heavy modules (the ledger, pydantic,
YAML, the providers) are imported inside the commands so ``afc --help`` stays fast.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

app = typer.Typer(
    name="afc",
    help="Batch renderer for paid AI generation jobs: a retry never pays again for an output "
    "that is already stored, and every paid attempt is recorded with what it cost.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # locals may hold API keys: never print them
)

LedgerOpt = Annotated[
    str,
    typer.Option("--ledger", envvar="AFC_LEDGER", help="Ledger file (SQLite).", show_envvar=True),
]
StorageOpt = Annotated[
    str | None,
    typer.Option(
        "--storage",
        envvar="AFC_STORAGE",
        help="Output storage URL, e.g. file://./afc-outputs (the default).",
        show_envvar=True,
    ),
]
ConcurrencyOpt = Annotated[
    int, typer.Option("--concurrency", min=1, help="Jobs worked on at once.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress output.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="More progress detail.")]
BatchOpt = Annotated[str | None, typer.Option("--batch", help="Only this batch.")]
MaxSpendOpt = Annotated[
    str | None,
    typer.Option(
        "--max-spend",
        metavar="USD",
        help="Cap this run's priced spend; stop starting attempts before it (exit 4).",
    ),
]
AllowUnpricedOpt = Annotated[
    bool,
    typer.Option(
        "--allow-unpriced", help="Under a budget, also run models with no rate card (uncapped)."
    ),
]

costs_app = typer.Typer(help="Spend recorded in the ledger.", no_args_is_help=True)
app.add_typer(costs_app, name="costs")
queue_app = typer.Typer(help="The backlog, for operators and cron.", no_args_is_help=True)
app.add_typer(queue_app, name="queue")
webhooks_app = typer.Typer(help="The outbox of job events.", no_args_is_help=True)
app.add_typer(webhooks_app, name="webhooks")

DEFAULT_LEDGER = "afc.db"
DEFAULT_CONCURRENCY = 8


def _err(message: str) -> None:
    from afc_cli.secrets import scrub

    sys.stderr.write(f"afc: {scrub(message)}\n")


@contextmanager
def _boundary() -> Iterator[None]:
    from afc_cli.errors import EXIT_INTERRUPTED, AfcError

    try:
        yield
    except AfcError as exc:
        _err(exc.message)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        _err("interrupted; every job stays resumable (run 'afc resume')")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except (typer.Exit, typer.Abort):
        raise
    except Exception as exc:
        # The last line of defence: one line, never a traceback (AFC_DEBUG=1 shows it).
        if os.environ.get("AFC_DEBUG"):
            raise
        import sqlite3

        from afc_cli.errors import EXIT_JOB_FAILED, ledger_write_error

        if isinstance(exc, sqlite3.Error | OSError):
            # after writing started (a full disk, an I/O error): exit 1, the ledger as of its
            # last commit, every job resumable
            if isinstance(exc, sqlite3.Error):
                _err(ledger_write_error(None, exc).message)
            else:
                _err(f"{exc}; every job stays resumable: fix it, then run 'afc resume'")
        else:
            _err(
                f"unexpected error: {exc.__class__.__name__}: {exc} (a bug in afc; "
                "AFC_DEBUG=1 shows where)"
            )
        raise typer.Exit(EXIT_JOB_FAILED) from None


def _reporter(json_out: bool, quiet: bool, verbose: bool):
    from afc_cli.output import LineReporter, RichReporter
    from afc_cli.run import Reporter

    if quiet:
        return Reporter()
    if sys.stderr.isatty() and not json_out:
        return RichReporter(verbose=verbose)
    return LineReporter(verbose=verbose)


def _interrupt_on_sigterm() -> None:
    """SIGTERM (a stopped cron job, a container shutdown) is an interruption like Ctrl-C: stop,
    record what is in flight as unknown, release the leases, exit 130; every job stays
    resumable. A second Ctrl-C or SIGTERM exits at once (the ledger is consistent at every
    commit, so nothing is lost by not tidying up)."""

    def first(signum, frame):
        signal.signal(signal.SIGINT, second)
        signal.signal(signal.SIGTERM, second)
        raise KeyboardInterrupt

    def second(signum, frame):
        os._exit(130)

    signal.signal(signal.SIGINT, first)
    signal.signal(signal.SIGTERM, first)


def _print_run(result: Any, json_out: bool, quiet: bool) -> None:
    from afc_cli.costs import format_usd
    from afc_cli.output import emit_json, job_json

    jobs = [job_json(row) for row in result.jobs]
    conflicts = result.admit.conflicts if result.admit else []
    if json_out:
        payload: dict[str, Any] = {}
        if result.admit is not None:
            payload["batch"] = result.admit.batch
            payload["storage"] = result.admit.storage
            payload["admitted"] = {
                "new": len(result.admit.new),
                "replayed": len(result.admit.replayed),
                "conflicts": len(conflicts),
            }
        payload.update(
            {
                "jobs": jobs,
                "counts": result.counts,
                "conflicts": conflicts,
                "spent": format_usd(result.stats.spent_micros),
                "budget": format_usd(result.budget.cap_micros) if result.budget else None,
                "stopped_by_budget": result.stats.budget_hit,
                "exit_code": result.exit_code,
            }
        )
        emit_json(payload)
        return
    for conflict in conflicts:
        _err(
            f"IDEMPOTENCY_CONFLICT: key {conflict['key']!r} was admitted with request hash "
            f"{conflict['stored_hash']}, this manifest's request hashes to "
            f"{conflict['new_hash']}. The stored job and its output are untouched; use a new "
            "key for a changed request."
        )
    if quiet:
        return
    if result.admit is not None:
        admit = result.admit
        _err(
            f"batch {admit.batch}: {len(admit.new)} new, {len(admit.replayed)} replayed, "
            f"{len(conflicts)} conflicting; storage {admit.storage}"
        )
    not_ok = [j for j in jobs if j["status"] != "succeeded"]
    for job in not_ok:
        why = job["error"]["message"] if job["error"] else job["waiting"] or ""
        _err(f"{job['batch']}/{job['key']}: {job['status']} at {job['step']}: {why}")
    counts = ", ".join(f"{n} {status}" for status, n in sorted(result.counts.items()))
    _err(
        f"{result.ran} run; {counts or 'no jobs'}; "
        f"this run spent {format_usd(result.stats.spent_micros)} USD (priced)"
    )
    if result.stats.budget_hit:
        _err(
            f"stopped by the budget of {format_usd(result.budget.cap_micros)} USD: no new "
            "attempt was started past it; every waiting job resumes with 'afc resume'"
        )


def _prestart_helper() -> None:
    """Boot the file helper (afc_cli/offload.py) while this process imports the run and
    admits jobs, instead of after: the first provider calls wait for its first answer."""
    from afc_cli import offload

    offload.prestart()


@app.command()
def submit(
    manifest: Annotated[str, typer.Argument(help="The job manifest (YAML).")],
    no_run: Annotated[bool, typer.Option("--no-run", help="Admit the jobs, run none.")] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only say what a run would do and cost (afc plan).")
    ] = False,
    max_spend: MaxSpendOpt = None,
    allow_unpriced: AllowUnpricedOpt = False,
    ledger: LedgerOpt = DEFAULT_LEDGER,
    storage: StorageOpt = None,
    concurrency: ConcurrencyOpt = DEFAULT_CONCURRENCY,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Validate a manifest, admit its jobs idempotently, and run every job not yet finished."""
    if dry_run:
        _plan(manifest, ledger, storage, max_spend, json_out)
        return
    with _boundary():
        if not no_run:
            _prestart_helper()
        from afc_cli import run

        _interrupt_on_sigterm()
        result = run.submit(
            manifest,
            ledger_path=ledger,
            storage=storage,
            concurrency=concurrency,
            run=not no_run,
            reporter=_reporter(json_out, quiet, verbose),
            max_spend=max_spend,
            allow_unpriced=allow_unpriced,
        )
        _print_run(result, json_out, quiet)
        if no_run and result.exit_code != 3:
            raise typer.Exit(0)
        raise typer.Exit(result.exit_code)


@app.command()
def resume(
    batch: BatchOpt = None,
    max_spend: MaxSpendOpt = None,
    allow_unpriced: AllowUnpricedOpt = False,
    ledger: LedgerOpt = DEFAULT_LEDGER,
    storage: StorageOpt = None,
    concurrency: ConcurrencyOpt = DEFAULT_CONCURRENCY,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Run every unfinished job in the ledger (what cron calls)."""
    with _boundary():
        _prestart_helper()
        from afc_cli import run

        _interrupt_on_sigterm()
        result = run.resume(
            ledger_path=ledger,
            batch=batch,
            storage=storage,
            concurrency=concurrency,
            reporter=_reporter(json_out, quiet, verbose),
            max_spend=max_spend,
            allow_unpriced=allow_unpriced,
        )
        _print_run(result, json_out, quiet)
        raise typer.Exit(result.exit_code)


def _plan(manifest: str, ledger: str, storage: str | None, max_spend: str | None, json_out: bool):
    with _boundary():
        from afc_cli.plan import describe, plan

        result = plan(manifest, ledger_path=ledger, storage=storage, max_spend=max_spend)
        if json_out:
            from afc_cli.output import emit_json

            emit_json(result)
        else:
            sys.stdout.write(describe(result) + "\n")


@app.command("plan")
def plan_command(
    manifest: Annotated[str, typer.Argument(help="The job manifest (YAML).")],
    max_spend: MaxSpendOpt = None,
    ledger: LedgerOpt = DEFAULT_LEDGER,
    storage: StorageOpt = None,
    concurrency: ConcurrencyOpt = DEFAULT_CONCURRENCY,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Say what a submit would do and cost: new, replayed, stored, conflicting, estimate.

    Writes nothing: no ledger, no storage, no provider call."""
    _plan(manifest, ledger, storage, max_spend, json_out)


@costs_app.command("report")
def costs_report_command(
    batch: BatchOpt = None,
    since: Annotated[
        str | None, typer.Option("--since", metavar="DATE", help="Only attempts since (ISO).")
    ] = None,
    by: Annotated[
        str, typer.Option("--by", help="Group by provider, model, batch or day.")
    ] = "provider",
    csv_out: Annotated[bool, typer.Option("--csv", help="CSV on stdout.")] = False,
    ledger: LedgerOpt = DEFAULT_LEDGER,
    storage: StorageOpt = None,
    concurrency: ConcurrencyOpt = DEFAULT_CONCURRENCY,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Spend by provider, model, batch or day: priced, unpriced, failed, avoided."""
    with _boundary():
        from afc_cli.costs_report import FIELDS, costs_report, footer
        from afc_cli.output import emit_csv, emit_json, emit_table

        report = costs_report(ledger, batch=batch, since=since, by=by)
        columns = [by, *FIELDS]
        if json_out:
            emit_json({"rows": report["rows"], "total": report["total"]})
        elif csv_out:
            emit_csv([*report["rows"], {by: "total", **report["total"]}], columns)
        else:
            rows = [*report["rows"], {by: "total", **report["total"]}]
            emit_table(rows, columns, title=f"spend by {by} (USD)", footer=footer(report))


@app.command()
def cancel(
    keys: Annotated[list[str] | None, typer.Argument(help="Keys of the jobs to cancel.")] = None,
    batch: BatchOpt = None,
    ledger: LedgerOpt = DEFAULT_LEDGER,
    storage: StorageOpt = None,
    concurrency: ConcurrencyOpt = DEFAULT_CONCURRENCY,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Cancel jobs (KEY..., or every unfinished job of --batch). Final: never rendered again."""
    with _boundary():
        from afc_cli.ops import cancel as cancel_jobs

        result = cancel_jobs(ledger, keys or [], batch)
        if json_out:
            from afc_cli.output import emit_json

            emit_json(result)
        elif not quiet:
            for item in result["cancelled"]:
                _err(f"{item['batch']}/{item['key']}: cancelled")
            for item in result["already_final"]:
                _err(f"{item['batch']}/{item['key']}: already {item['status']}, left as it is")
            for item in result["not_found"]:
                _err(f"{item['key']}: no such job")
        if result["not_found"]:
            raise typer.Exit(2)


@queue_app.command("stats")
def queue_stats_command(
    fail_if: Annotated[
        list[str] | None,
        typer.Option(
            "--fail-if",
            metavar="EXPR",
            help="Exit 1 when a condition holds, e.g. 'dlq>0' or 'oldest_age_seconds>3600'.",
        ),
    ] = None,
    ledger: LedgerOpt = DEFAULT_LEDGER,
    storage: StorageOpt = None,
    concurrency: ConcurrencyOpt = DEFAULT_CONCURRENCY,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Queued, in flight, delayed, dead-lettered, and the oldest unfinished job's age."""
    with _boundary():
        from afc_cli.ops import failed_conditions, queue_stats

        stats = queue_stats(ledger)
        met = failed_conditions(stats, fail_if or [])
        if json_out:
            from afc_cli.output import emit_json

            emit_json(stats)
        else:
            sys.stdout.write("".join(f"{name} {value}\n" for name, value in stats.items()))
        if met:
            _err("alert: " + "; ".join(met))
            raise typer.Exit(1)


def _deliveries_out(stats: Any, json_out: bool, quiet: bool) -> None:
    summary = {
        "delivered": stats.delivered,
        "retrying": stats.retrying,
        "dead": stats.dead,
        "skipped": stats.skipped,
    }
    if json_out:
        from afc_cli.output import emit_json

        emit_json(summary)
    elif not quiet:
        _err(", ".join(f"{n} {k}" for k, n in summary.items()))
    if stats.dead:
        raise typer.Exit(1)


@webhooks_app.command("list")
def webhooks_list(
    dead: Annotated[bool, typer.Option("--dead", help="Only dead deliveries.")] = False,
    ledger: LedgerOpt = DEFAULT_LEDGER,
    storage: StorageOpt = None,
    concurrency: ConcurrencyOpt = DEFAULT_CONCURRENCY,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Webhook deliveries: id, event, URL, status, tries, last answer."""
    with _boundary():
        from afc_cli.output import emit_json, emit_table
        from afc_cli.report import _iso
        from afc_cli.webhooks import listing

        rows = [
            {
                "id": r["id"],
                "event": r["event"],
                "url": r["url"],
                "status": r["status"],
                "attempts": r["attempts"],
                "last_status": r["last_status"],
                "last_error": r["last_error"],
                "next_attempt_at": _iso(r["next_attempt_at"]) if r["status"] == "pending" else None,
                "delivered_at": _iso(r["delivered_at"]),
                "envelope": json.loads(r["envelope"]) if verbose or json_out else None,
            }
            for r in listing(ledger, dead)
        ]
        if json_out:
            emit_json({"deliveries": rows})
        else:
            emit_table(
                rows,
                ["id", "event", "url", "status", "attempts", "last_status", "last_error"],
            )


@webhooks_app.command("deliver")
def webhooks_deliver(
    ledger: LedgerOpt = DEFAULT_LEDGER,
    storage: StorageOpt = None,
    concurrency: ConcurrencyOpt = DEFAULT_CONCURRENCY,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Deliver every due webhook now (for cron); exit 1 if one became dead."""
    with _boundary():
        from afc_cli.webhooks import deliver

        _deliveries_out(deliver(ledger), json_out, quiet)


@webhooks_app.command("replay")
def webhooks_replay(
    delivery_id: Annotated[str, typer.Argument(metavar="ID", help="The delivery's id.")],
    ledger: LedgerOpt = DEFAULT_LEDGER,
    storage: StorageOpt = None,
    concurrency: ConcurrencyOpt = DEFAULT_CONCURRENCY,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Send a dead or delivered event again: its exact envelope, signed afresh."""
    with _boundary():
        from afc_cli.webhooks import replay

        _deliveries_out(replay(ledger, delivery_id), json_out, quiet)


@app.command()
def status(
    batch: BatchOpt = None,
    ledger: LedgerOpt = DEFAULT_LEDGER,
    storage: StorageOpt = None,
    concurrency: ConcurrencyOpt = DEFAULT_CONCURRENCY,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Counts by status, and per job: key, status, step, output key, attempts, cost."""
    with _boundary():
        from afc_cli.ledger import Ledger
        from afc_cli.output import emit_json, emit_table, job_json

        book = Ledger(ledger, create=False)
        try:
            rows = [job_json(r) for r in book.status_rows(batch)]
        finally:
            book.close()
        counts: dict[str, int] = {}
        for row in rows:
            counts[row["status"]] = counts.get(row["status"], 0) + 1
        if json_out:
            emit_json({"jobs": rows, "counts": counts})
            return
        for row in rows:
            row["cost"] = row["cost"] if row["cost"] is not None else "unpriced"
        emit_table(
            rows,
            ["batch", "key", "status", "step", "output_key", "attempts", "cost"],
            footer=", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no jobs",
        )


@app.command()
def show(
    key: Annotated[str, typer.Argument(help="The job's idempotency key.")],
    batch: BatchOpt = None,
    ledger: LedgerOpt = DEFAULT_LEDGER,
    storage: StorageOpt = None,
    concurrency: ConcurrencyOpt = DEFAULT_CONCURRENCY,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """One job's whole story: request, steps, every attempt with error and cost, events."""
    with _boundary():
        from afc_cli.report import job_story, print_story

        story = job_story(ledger, key, batch)
        if json_out:
            from afc_cli.output import emit_json

            emit_json(story)
        else:
            print_story(story)


def main() -> None:
    # Reading a SIGPIPE'd pipe (afc status | head) should end quietly.
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.environ.setdefault("PYTHONIOENCODING", "utf-8")
    app()
