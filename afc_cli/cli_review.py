"""``afc review``: list, approve and reject jobs awaiting review (afc_cli/review.py).

Attached to the main app by afc_cli/cli.py; each command opens the ledger, calls one function
of afc_cli/review.py and formats its result."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from afc_cli.cli import (
    DEFAULT_LEDGER,
    BatchOpt,
    JsonOpt,
    KeyCommand,
    LedgerOpt,
    QuietOpt,
    UnusedConcurrencyOpt,
    UnusedQuietOpt,
    UnusedStorageOpt,
    UnusedVerboseOpt,
    _again,
    _boundary,
    _err,
    _examples,
    _moved_line,
    _sigterm_as_ctrl_c,
)

review_app = typer.Typer(
    help="Jobs paused for a person's review (review: true): list, approve, reject.",
    epilog=_examples(
        "afc review list",
        "afc review approve style-frame --note 'warmer, good'",
        "afc review reject style-frame --reason 'too dark'",
    ),
    no_args_is_help=True,
)
ByOpt = Annotated[
    str | None,
    typer.Option(
        "--by", metavar="NAME", help="Who decides (recorded; default: AFC_USER, else the OS user)."
    ),
]
# what an interrupted decision (Ctrl-C while the ledger's write lock is awaited) tells: not the
# runs' 'every job stays resumable (run afc resume)', which decides nothing
DECIDED_WHOLE = (
    "a decision is one transaction, made whole or not at all: 'afc review list' shows what "
    "still awaits one"
)
KeysArg = Annotated[list[str], typer.Argument(metavar="KEY", help="Keys of the jobs to decide.")]
Sha256Opt = Annotated[
    str | None,
    typer.Option(
        "--sha256",
        metavar="HEX",
        help="The SHA-256 of the output decided on ('afc review list --json' gives it), with "
        "one KEY: refused (exit 2, nothing decided) if the job has another output now.",
    ),
]


def _age(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 2 * 86400:
        return f"{seconds // 3600}h {seconds % 3600 // 60}m"
    return f"{seconds // 86400}d {seconds % 86400 // 3600}h"


@review_app.command(
    "list",
    epilog=_examples("afc review list", "afc review list --batch trailer-shots --json"),
)
def review_list(
    batch: BatchOpt = None,
    ledger: LedgerOpt = DEFAULT_LEDGER,
    json_out: JsonOpt = False,
    storage: UnusedStorageOpt = None,
    concurrency: UnusedConcurrencyOpt = None,
    quiet: UnusedQuietOpt = False,
    verbose: UnusedVerboseOpt = False,
) -> None:
    """Jobs awaiting review, oldest first: key, stored output, cost, age.

    --json gives each job's job_id, batch, key, model, output (file:// or s3:// URI),
    sha256 (the stored output's), cost (a decimal string, null when unpriced; as afc status
    gives it), unpriced_attempts (its attempts of unknown cost, not in cost), age_s and
    prompt."""
    with _boundary(reads=ledger):
        from afc_cli.costs import cost_cell
        from afc_cli.ledger import Ledger
        from afc_cli.review import pending

        opened = Ledger(ledger, create=False, reading=True)
        try:
            rows = pending(opened, batch)
            # as afc status: a ledger of several batches names each row's batch (README
            # "Reading the output"), whatever batches the rows awaiting review are of; a key
            # alone is no job to approve there ('a key of several batches: add --batch')
            batched = batch is None and len(opened.batches()) > 1
            moved = opened.moved_to()
        finally:
            opened.close()
        moved_to = moved["destination"] if moved else None
        if moved_to:
            # these jobs are decided in the ledger they moved to (a decision here is refused),
            # where one may have been decided since: a list read here, unsaid, was stale
            _err(_moved_line(moved_to, "its reviews are decided there"))
        if json_out:
            from afc_cli.output import emit_json

            emit_json(
                {
                    "awaiting_review": [
                        {k: v for k, v in row.items() if k != "cost_micros"} for row in rows
                    ],
                    **({"moved_to": moved_to} if moved_to else {}),
                }
            )
            return
        from afc_cli.tables import Col, emit

        shown = [
            {
                "batch": row["batch"],
                "key": row["key"],
                "output": row["output"],
                "cost": cost_cell(row["cost"], row["unpriced_attempts"]),
                "age": _age(row["age_s"]),
            }
            for row in rows
        ]
        columns = [Col("key"), Col("output", kind="text"), Col("cost", right=True), Col("age")]
        if batched:
            columns.insert(0, Col("batch"))
        emit(shown, columns, notes=[] if rows else ["no job is awaiting review"], group="batch")


def _decide(
    ledger: str, what: str, keys: list[str], by: str | None, json_out: bool, quiet: bool, **why
) -> None:
    """Decide through ``afc_cli.review`` (``approve`` or ``reject``, with ``why``: its note or
    reason) and say what was decided."""
    from afc_cli import review
    from afc_cli.ledger import Ledger
    from afc_cli.ops import who

    opened = Ledger(ledger, create=False)
    waiting = failed = 0
    try:
        if what == "approved":
            decided = review.approve(opened, keys, by=by or who(), **why)
            if not (json_out or quiet):
                waiting = review.blocked_by(opened, decided, why.get("batch"))
        else:
            decided, failed = review.reject(opened, keys, by=by or who(), **why)
    except review.NotDecided as exc:
        raise review.NotDecided(exc.failed, exc.fix, f"run this again: {_again()}") from None
    finally:
        opened.close()
    _decided(decided, what, json_out, quiet, waiting, failed)


def _decided(
    keys: list[str], what: str, json_out: bool, quiet: bool, waiting: int = 0, failed: int = 0
) -> None:
    """``waiting``: the blocked jobs that need the approved ones (``review.blocked_by``);
    ``failed``: those a rejection failed (``review.reject``)."""
    if json_out:
        from afc_cli.output import emit_json

        emit_json({what: keys, **({"dependents_failed": failed} if what == "rejected" else {})})
    elif not quiet:
        for key in keys:
            _err(f"{key}: {what}")
        if what == "approved":
            if waiting:  # said of no job when nothing needs them
                _err(
                    (
                        "1 blocked job needs them: it runs"
                        if waiting == 1
                        else f"{waiting} blocked jobs need them: each runs"
                    )
                    + " at the next 'afc resume' (or cron, or a worker's next claim) once all"
                    " its needs have succeeded"
                )
        elif failed:  # said of no job when nothing needed them
            _err(
                (
                    "1 blocked job that needed them failed"
                    if failed == 1
                    else f"{failed:,} blocked jobs that needed them failed"
                )
                + " (DEPENDENCY_FAILED: 'afc status --status failed' lists them); 'afc resume'"
                " passes them by, as it passes a rejected job, and a re-submit changes nothing"
                " of a failed job: to run them, a new job under a new key replaces the rejected"
                " one, and they go under new keys of their own whose needs name it"
            )
    sys.stdout.flush()


@review_app.command(
    "approve",
    cls=KeyCommand,
    epilog=_examples(
        "afc review approve style-frame",
        "afc review approve style-frame --batch trailer-shots --note 'warmer, good'",
        "afc review approve style-frame --sha256 \"$SHA\"  # from 'review list --json'",
    ),
)
def review_approve(
    keys: KeysArg,
    note: Annotated[
        str | None, typer.Option("--note", metavar="TEXT", help="Why, kept with the decision.")
    ] = None,
    sha256: Sha256Opt = None,
    by: ByOpt = None,
    batch: BatchOpt = None,
    ledger: LedgerOpt = DEFAULT_LEDGER,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    storage: UnusedStorageOpt = None,
    concurrency: UnusedConcurrencyOpt = None,
    verbose: UnusedVerboseOpt = False,
) -> None:
    """Approve jobs awaiting review: they succeed, and jobs that need them can run.

    All named jobs are decided together or none (exit 2 naming the key that is unknown, in
    several batches without --batch, or not awaiting review). --sha256 HEX (one KEY) approves
    only the output of that SHA-256: a job rendered again since is refused (exit 2)."""
    with _boundary(again=_again(), why=DECIDED_WHOLE):
        _sigterm_as_ctrl_c()  # exit 130, said so, as Ctrl-C: the decision is made whole or not
        _decide(
            ledger, "approved", keys, by, json_out, quiet, note=note, batch=batch, sha256=sha256
        )


@review_app.command(
    "reject",
    cls=KeyCommand,
    epilog=_examples(
        "afc review reject style-frame --reason 'too dark'",
        "afc review reject style-frame --reason 'too dark' --sha256 \"$SHA\"",
    ),
)
def review_reject(
    keys: KeysArg,
    reason: Annotated[
        str, typer.Option("--reason", metavar="TEXT", help="Why (required; kept with the job).")
    ],
    sha256: Sha256Opt = None,
    by: ByOpt = None,
    batch: BatchOpt = None,
    ledger: LedgerOpt = DEFAULT_LEDGER,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    storage: UnusedStorageOpt = None,
    concurrency: UnusedConcurrencyOpt = None,
    verbose: UnusedVerboseOpt = False,
) -> None:
    """Reject jobs awaiting review: final (rejected); jobs that need them fail with
    DEPENDENCY_FAILED. All named jobs are decided together or none (exit 2). --sha256 HEX
    (one KEY) rejects only the output of that SHA-256, as for approve."""
    with _boundary(again=_again(), why=DECIDED_WHOLE):
        _sigterm_as_ctrl_c()  # exit 130, said so, as Ctrl-C: the decision is made whole or not
        _decide(
            ledger,
            "rejected",
            keys,
            by,
            json_out,
            quiet,
            reason=reason,
            batch=batch,
            sha256=sha256,
        )
