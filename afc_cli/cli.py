"""The ``afc`` command: each command parses options, calls one library function, formats.

One error boundary (``_boundary``) turns domain errors into a message on stderr and their exit
code; no traceback reaches a user for an expected error. Heavy modules (the ledger, pydantic,
YAML, the providers) are imported inside the commands so ``afc --help`` stays fast.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

try:  # typer 0.29 carries its own click; earlier ones use click's
    from typer._click.exceptions import NoSuchOption
except ImportError:  # pragma: no cover - another typer
    from click.exceptions import NoSuchOption  # type: ignore[no-redef]


class AfcGroup(TyperGroup):
    """afc's top level. Its options come after the command's name (README "Commands"); one
    written before it (``afc --json status``, ``afc --ledger x.db resume``, as ``git -C`` or
    ``docker --host`` take theirs) was refused 'No such option: --json (Possible options:
    --version)', which read as if afc had no --json at all. The refusal (exit 2) now says
    where the option goes, when the command named after it takes it."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        given = list(args)  # the parser consumes the list it is given
        try:
            return super().parse_args(ctx, args)
        except NoSuchOption as exc:
            hint = _after_the_command(self, given, exc.option_name)
            if hint is None:
                raise
            raise NoSuchOption(exc.option_name, f"{exc.message}; {hint}", ctx=ctx) from None


def _after_the_command(group: Any, args: list[str], option: str) -> str | None:
    """'afc's options go after the command's name: afc status --json', when a command named
    in ``args`` (a group's too: ``afc --json queue stats``) takes ``option``; None if none
    does (a mistyped option keeps click's words)."""
    words, command = [], group
    for arg in args:  # an option's value before the name (x.db) is passed over
        found = getattr(command, "commands", {}).get(arg)
        if found is not None:
            words.append(arg)
            command = found
        elif words:
            break
    if not words or not hasattr(command, "params"):
        return None
    takes = [p for p in command.params if option in getattr(p, "opts", [])]
    if not takes:
        return None
    value = "" if getattr(takes[0], "is_flag", False) else " ..."
    return f"afc's options go after the command's name: afc {' '.join(words)} {option}{value}"


app = typer.Typer(
    cls=AfcGroup,
    name="afc",
    help="Batch renderer for paid AI generation jobs: a retry never pays again for an output "
    "that is already stored, and every paid attempt is recorded with what it cost.",
    epilog="\b\nExamples:\n  afc plan shots.yaml\n  afc submit shots.yaml --max-spend 25\n"
    "  afc status\n  afc outputs --json\n\nRun 'afc COMMAND -h' for a command's options.",
    no_args_is_help=True,
    # plain help (no boxes, no <bool> type column): it reads the same on a terminal, in a
    # pager and in a file
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_show_locals=False,  # locals may hold API keys: never print them
)


def _examples(*lines: str) -> str:
    """A command's help ends with examples (one per line, kept as written)."""
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)


def _path_not_option(
    ctx: typer.Context, param: typer.CallbackParam, value: str | None
) -> str | None:
    """Refuse a path option's value that is an option: click hands ``afc status --ledger
    --json`` the word ``--json`` as the ledger, and the command would make a file of that
    name (a new empty ledger, or an HTML report) and answer as if nothing were amiss. A file
    whose name starts with a dash is still reachable as ``./-name``; exit 2 as any usage
    error. A value from the environment (``AFC_LEDGER``) is no option's word: it is taken as
    written (refused, a ledger named ``-night.db`` there was 'an option' to every command)."""
    # (by name: typer carries a click of its own, whose enum is not click's)
    source = ctx.get_parameter_source(param.name or "")
    if getattr(source, "name", None) == "ENVIRONMENT":
        return value
    if value == "-" and param.name == "html":
        return value  # its own refusal says the report goes to a file, not to stdout
    if value == "-":
        raise typer.BadParameter(
            "'-' names stdin or stdout, not a file (write ./- for a file of that name)"
        )
    if value and value.startswith("-"):
        raise typer.BadParameter(
            f"{value!r} is an option, not a path (write ./{value} for a file of that name)"
        )
    return value


LedgerOpt = Annotated[
    str,
    typer.Option(
        "--ledger",
        envvar="AFC_LEDGER",
        callback=_path_not_option,
        metavar="PATH",
        help="The ledger: a SQLite file, or a postgresql:// URL (afc-cli[postgres]).",
        show_envvar=True,
    ),
]
StorageOpt = Annotated[
    str | None,
    typer.Option(
        "--storage",
        envvar="AFC_STORAGE",
        metavar="URL",
        help="Output storage URL, e.g. file://./afc-outputs (the default) or s3://BUCKET/PREFIX.",
        show_envvar=True,
    ),
]
ConcurrencyOpt = Annotated[
    int, typer.Option("--concurrency", min=1, metavar="N", help="Renders in flight at once.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress output.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="More progress detail.")]
BatchOpt = Annotated[
    str | None, typer.Option("--batch", metavar="B", help="Only this batch (exit 2 if unknown).")
]


class KeyCommand(TyperCommand):
    """A command that takes job keys (``afc show``, ``cancel``, ``retry``, ``review
    approve|reject``). A manifest's key may begin with '-' (``-take2``: the key alphabet
    allows it), which the command line reads as an option: ``afc show -take2`` said only
    'No such option: -t', and the commands afc itself advises with the key in them ('afc
    retry -take2', 'afc review approve -take2 --batch B') failed so, as said. The error now
    says how such a key is written: after ``--``, the options before it."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        given = list(args)  # the parser consumes the list it is given
        try:
            return super().parse_args(ctx, args)
        except NoSuchOption as exc:
            key = _dash_key(given, exc.option_name, self)
            if key is None or exc.possibilities:  # a mistyped option ('--jsn'): click's words
                raise
            raise NoSuchOption(
                exc.option_name,
                f"{exc.message}; a job key that begins with '-' is written after '--', the "
                f"options before it: {ctx.command_path} [OPTIONS] -- {key}",
                ctx=ctx,
            ) from None


def _dash_key(args: list[str], option_name: str, command: Any) -> str | None:
    """The argument before any ``--`` that the option parser read as ``option_name`` (the
    whole of ``-take2`` for '-t', of ``-yes`` for the '-e' after ``afc cancel``'s -y) and that is no option of ``command`` but could be a job's
    key; None if there is none."""
    from afc_cli.manifest import KEY_ALPHABET

    options = {name for param in command.params for name in getattr(param, "opts", [])}
    for arg in itertools.takewhile(lambda a: a != "--", args):
        if arg in options or not arg.startswith("-") or len(arg) < 2:
            continue
        # a short option's letters are read one by one: '-yes' is -y, then '-e' refused
        read_as = arg == option_name or (
            not arg.startswith("--") and len(option_name) == 2 and option_name[1] in arg[1:]
        )
        if read_as and set(arg) <= KEY_ALPHABET:
            return arg
    return None


# Every command still accepts the round-1 shared options (scripts pass them everywhere), but a
# command's help lists only the ones it uses: these are accepted, hidden and ignored.
UnusedStorageOpt = Annotated[str | None, typer.Option("--storage", hidden=True)]
UnusedConcurrencyOpt = Annotated[int | None, typer.Option("--concurrency", hidden=True)]
UnusedQuietOpt = Annotated[bool, typer.Option("--quiet", "-q", hidden=True)]
UnusedVerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", hidden=True)]
UnusedLedgerOpt = Annotated[str | None, typer.Option("--ledger", hidden=True)]
MaxSpendOpt = Annotated[
    str | None,
    typer.Option(
        "--max-spend",
        metavar="USD",
        help="Cap this run's priced spend; stop starting attempts before it (exit 4).",
    ),
]
GraceOpt = Annotated[
    float,
    typer.Option(
        "--grace",
        envvar="AFC_GRACE_S",
        metavar="SECONDS",
        min=0,
        help="On Ctrl-C or SIGTERM, how long calls in flight may finish (and be stored) "
        "before they are abandoned.",
        show_envvar=True,
    ),
]
AllowUnpricedOpt = Annotated[
    bool,
    typer.Option(
        "--allow-unpriced", help="Under a budget, also run models with no rate card (uncapped)."
    ),
]

costs_app = typer.Typer(
    help="Spend recorded in the ledger.",
    epilog=_examples("afc costs report", "afc costs report --by model --csv > spend.csv"),
    no_args_is_help=True,
)
app.add_typer(costs_app, name="costs")
queue_app = typer.Typer(
    help="The backlog, for operators and cron.",
    epilog=_examples("afc queue stats", "afc queue stats --fail-if 'dlq>0'"),
    no_args_is_help=True,
)
app.add_typer(queue_app, name="queue")
webhooks_app = typer.Typer(
    help="The outbox of job events.",
    epilog=_examples("afc webhooks list --dead", "afc webhooks replay ce69a6"),
    no_args_is_help=True,
)
app.add_typer(webhooks_app, name="webhooks")
ledger_app = typer.Typer(
    help="Move a ledger between backends.",
    epilog=_examples("afc ledger copy afc.db postgresql://afc@db.internal/afc"),
    no_args_is_help=True,
)
app.add_typer(ledger_app, name="ledger")


def _version(value: bool) -> None:
    if value:
        from afc_cli import __version__

        sys.stdout.write(f"afc {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print afc's version and exit."
        ),
    ] = False,
) -> None:
    pass


DEFAULT_LEDGER = "afc.db"
DEFAULT_CONCURRENCY = 8


def _moved_line(moved_to: str, there: str) -> str:
    """What status, queue stats, costs report, review list and webhooks list say of a moved
    ledger, or of an unfinished copy (``core.moved_line``: the pictures say it too)."""
    from afc_cli.ledger.core import moved_line

    return moved_line(moved_to, there)


def _err(message: str) -> None:
    from afc_cli.secrets import scrub, visible

    sys.stderr.write(f"afc: {visible(scrub(message))}\n")


# Whether a command entered its boundary: before that, typer turns a KeyboardInterrupt (an
# early handler's SIGTERM or SIGHUP, afc_cli/__main__.py; a Ctrl-C) into exit 130 in silence
_began = False


@contextmanager
def _boundary(
    again: str | None = None,
    why: str = "it admits what is missing",
    reads: str | None = None,
    each: str | None = None,
    runs: bool = True,
) -> Iterator[None]:
    """Domain errors to their exit codes, in one line each. ``again``: the command that picks
    up after an interruption outside a run loop, when it is not ``afc resume`` (a submit
    interrupted while it admits has perhaps admitted nothing: resume would find no job), and
    ``why`` running it again is safe. ``reads``: the ledger of a command that only reads it.
    ``each``: what a command that changes jobs one transaction each, outside a run, does
    (``retry``, ``cancel``): interrupted, or meeting a ledger it cannot write, it says that
    the jobs changed before are kept and the rest are not, not a run's 'afc resume' (which
    retries and cancels nothing). ``runs=False``: a command that runs no job (``webhooks
    deliver``): a ledger it cannot write says to run ``again``, not a run's 'afc resume'."""
    from afc_cli.errors import EXIT_INTERRUPTED, AfcError, LedgerWriteError, unwritten

    global _began
    _began = True
    from afc_cli import streams

    streams.say_to = _err  # the ledger's waits said (streams.say)

    def partly(what: str) -> str:
        return (
            f"{what}; each job's {each} is its own transaction: those made before are kept, "
            "the rest were not made ('afc status' shows which)"
        )

    def unwritten_line(exc: BaseException) -> str:
        """A ledger this command could not write, said for the command (``runs``, ``each``);
        a run's words ('afc resume') otherwise."""
        written = unwritten(exc)
        if written is None:
            return exc.message if isinstance(exc, AfcError) else str(exc)
        if reads is not None:
            # a command that only reads (a PostgreSQL connection lost under 'afc status', a
            # lock held past its wait): nothing of the ledger changed, and 'afc resume', a
            # run's fix, would start paying for jobs from a monitoring cron line. It could
            # not read the ledger (it said 'cannot write to' it)
            failed = getattr(written, "unread", written.failed)
            return (
                f"{failed}: {written.fix}; this command changed nothing: run it again: {_again()}"
            )
        if not runs and again:
            return f"{written.failed}: {written.fix}, then run this again ({why}): {again}"
        if each is not None:
            return f"{partly(written.failed)}: {written.fix}, then {each} those again"
        return written.message

    try:
        yield
    except LedgerWriteError as exc:
        _err(unwritten_line(exc))
        raise typer.Exit(exc.exit_code) from None
    except AfcError as exc:
        _err(exc.message)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        if each:
            _err(f"{partly('interrupted')}: {each} those again")
        elif again:
            _err(f"interrupted; nothing is lost: run this again ({why}): {again}")
        elif reads is not None:
            # a command that only reads the ledger: 'afc resume' is no fix (it would start
            # the ledger's unfinished jobs, paid renders, to mend a listing or a report)
            _err(f"interrupted; this command changed nothing: run it again: {_again()}")
        else:
            _err("interrupted; every job stays resumable (run 'afc resume')")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except (typer.Exit, typer.Abort):
        raise
    except Exception as exc:
        # The last line of defence: one line, never a traceback (AFC_DEBUG=1 shows it).
        if os.environ.get("AFC_DEBUG"):
            raise
        import sqlite3

        from afc_cli.errors import EXIT_JOB_FAILED
        from afc_cli.jsonout import ResultNotWritten

        if reads and isinstance(exc, sqlite3.DatabaseError) and _damaged(exc):
            # a command that only reads met a damaged page: nothing was written, and 'afc
            # resume' is no fix (it refuses the ledger): exit 2 as a ledger refused up front
            from afc_cli.ledger_file import damaged, ledger_path

            _err(damaged(ledger_path(reads), exc).message)
            raise typer.Exit(2) from None
        if isinstance(exc, sqlite3.Error | OSError):
            # after writing started (a full disk, an I/O error): exit 1, the ledger as of its
            # last commit, every job resumable
            if isinstance(exc, sqlite3.Error):
                _err(unwritten_line(exc))
            elif reads is not None:
                # a command that only reads the ledger (its output to a full disk, say):
                # nothing of the ledger changed, and 'afc resume' is no fix
                _err(f"{exc}; this command changed nothing: fix it, then run it again: {_again()}")
            elif isinstance(exc, ResultNotWritten):
                # what the command did is committed: 'afc resume' mends nothing of a review
                # decision, a cancel or a copy (jsonout.ResultNotWritten)
                _err(
                    f"the --json result could not be written to stdout ({exc}); what this "
                    "command did is done and recorded in the ledger ('afc status --json' "
                    "shows the jobs)"
                )
            else:
                _err(f"{exc}; every job stays resumable: fix it, then run 'afc resume'")
        else:
            _err(
                f"unexpected error: {exc.__class__.__name__}: {exc} (a bug in afc; "
                "AFC_DEBUG=1 shows where)"
            )
        raise typer.Exit(EXIT_JOB_FAILED) from None


def _damaged(exc: BaseException) -> bool:
    text = str(exc)
    return "malformed" in text or "not a database" in text


def _again() -> str:
    """This very command, as the user typed it (every option kept: --no-run, --max-spend)."""
    import shlex

    return shlex.join(["afc", *sys.argv[1:]])


def _reporter(json_out: bool, quiet: bool, verbose: bool):
    from afc_cli.output import LineReporter, RichReporter
    from afc_cli.run import Reporter

    if quiet:
        return Reporter()
    if sys.stderr.isatty():  # with --json too: the JSON goes to stdout, progress to stderr
        return RichReporter(verbose=verbose)
    return LineReporter(verbose=verbose)


def _interrupt_on_sigterm() -> None:
    """SIGTERM (a stopped cron job, a container shutdown) and SIGHUP (the terminal hung up)
    are an interruption like Ctrl-C.

    While jobs run, the run loop handles them (run.py's ``Interruption``: drain within the
    grace period, then exit 130). Before and after that (validation, admission, the summary)
    these handlers apply: stop, release, exit 130; every job stays resumable. A second Ctrl-C
    or SIGTERM exits at once (the ledger is consistent at every commit, so nothing is lost by
    not tidying up)."""
    from afc_cli.errors import STOP_SIGNALS

    def first(signum, frame):
        for sig in STOP_SIGNALS:
            signal.signal(sig, second)
        raise KeyboardInterrupt

    def second(signum, frame):
        os._exit(130)

    for sig in STOP_SIGNALS:
        signal.signal(sig, first)


def _sigterm_as_ctrl_c() -> None:
    """SIGTERM and SIGHUP are a Ctrl-C (exit 130) for afc webhooks deliver and replay, afc
    cancel, retry and review's decisions, and afc report (each said as its ``_boundary``
    says; a report's temporary file removed), before
    and after their asyncio loop (inside it, ``webhooks.run_stoppable``'s handlers cancel the
    loop's main task: a KeyboardInterrupt raised by a handler inside a task is printed as
    'unhandled exception during asyncio.run() shutdown' with its traceback). Each raises
    SIGINT, or a KeyboardInterrupt at once where SIGINT is ignored (a background job)."""
    from afc_cli.errors import STOP_SIGNALS

    def as_ctrl_c(signum: int, frame: Any) -> None:
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            # a background job's SIGINT is ignored (a shell's '&', nohup): a stop all the same,
            # outside the loop (inside it, webhooks.run_stoppable's handlers cancel the loop)
            raise KeyboardInterrupt
        signal.raise_signal(signal.SIGINT)

    for sig in STOP_SIGNALS:
        if sig != signal.SIGINT:
            signal.signal(sig, as_ctrl_c)


def _settled() -> None:
    """The command's result is decided (its run is over; the summary and the exit code are
    all that is left): a signal from here on (a cron job's timeout, a container stopping, a
    Ctrl-C) changes nothing. Ignored, and blocked in this thread, the only one left: Python's
    teardown puts its handlers back to the defaults (3.11 even an ignore set from Python), and
    a signal then killed the finished run (exit -15 / 143, not a code README documents)."""
    from afc_cli.errors import STOP_SIGNALS

    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, set(STOP_SIGNALS))


def _print_unlisted(result: Any, admitted_only: bool) -> None:
    """The unfinished jobs of the batch that the manifest does not list."""
    unlisted = result.unlisted
    if unlisted:
        shown = ", ".join(unlisted[:10]) + (
            f" and {len(unlisted) - 10} more" * (len(unlisted) > 10)
        )
        how = (
            "stay in its batch: 'afc resume' (or a submit) runs them"
            if admitted_only
            else "ran with it, as 'afc resume' runs them"
        )
        _err(
            f"{len(unlisted)} unfinished job(s) of batch {result.admit.batch} are not in this "
            f"manifest and {how}: {shown} ('afc cancel KEY' drops a job from its batch)"
        )


# the conflicts (and gates kept) a submit says one by one on stderr: an edit of the defaults
# over a 100,000-job list was 100,000 messages (57 MB, 44 s to write to a terminal), the
# summary lost above them
CONFLICTS_SAID = 20


def _print_run(
    result: Any,
    json_out: bool,
    quiet: bool,
    admitted_only: bool = False,
    exit_code: int | None = None,
) -> None:
    from afc_cli.costs import format_usd
    from afc_cli.output import emit_json, job_json
    from afc_cli.storage import shown_url

    _settled()

    if admitted_only and result.budget is not None:
        # a cap holds the run of the command given it: this one ran nothing, and the run
        # that renders these jobs (resume, a worker) has its own --max-spend, or none
        where = "--max-spend" if result.budget.source == "--max-spend" else "the manifest's budget"
        _err(
            f"warning: {where} of {format_usd(result.budget.cap_micros)} USD caps a submit's "
            "own run, and --no-run runs nothing: 'afc resume' and 'afc worker' run these jobs "
            "under their own --max-spend (none given: no cap)"
        )
    _print_budget_elsewhere(result)
    if not admitted_only:  # --no-run's own warning says its budget caps nothing
        _print_budget_behind_review(result)
    jobs = [job_json(row) for row in result.jobs]
    if json_out:  # what 'afc status --json' says they wait for (the summary words its own)
        for row, job in zip(result.jobs, jobs, strict=True):
            job["waiting"] = job["waiting"] or result.paused.get(row["id"]) or None
    conflicts = result.admit.conflicts if result.admit else []
    from afc_cli.conflicts import conflict_message
    from afc_cli.gates import changed_message, kept_message

    # said on stderr with --json too (stdout holds the JSON alone): a script's stdout goes to
    # a file, and its stderr, the person's, said nothing of why the submit exited 3
    places = result.admit.places if result.admit else {}
    for conflict in conflicts[:CONFLICTS_SAID]:
        _err(conflict_message(conflict, places.get(conflict["key"])))
    if len(conflicts) > CONFLICTS_SAID:
        _err(
            f"{len(conflicts) - CONFLICTS_SAID:,} more conflicting keys, refused as these "
            "(afc plan MANIFEST names each, --json carries every one)"
        )
    kept = result.admit.gates_kept if result.admit else []
    for each in kept[:CONFLICTS_SAID]:
        _err(kept_message(each))  # the manifest says a gate that this submit cannot apply
    if len(kept) > CONFLICTS_SAID:
        # review: true written in the defaults of a rendered 10,000-job list was 10,000
        # warnings every night, under -q too, as conflicts were
        more = len({each["key"] for each in kept[CONFLICTS_SAID:]})
        _err(
            f"{more:,} more {'key keeps' if more == 1 else 'keys keep'} the gates they were "
            "admitted with, as these (afc plan MANIFEST names each, --json carries every one)"
        )
    if result.admit is not None and result.admit.cards_dropped:
        # a cron host without the AFC_CONFIG file the batch was first submitted with: its
        # card left the batch, and the attempts after were unpriced, said only as 'N
        # attempts of unknown cost' once paid
        dropped = result.admit.cards_dropped
        _err(
            f"batch {result.admit.batch} is no longer priced for {', '.join(dropped)}: its "
            f"last submit had a rate card for {'it' if len(dropped) == 1 else 'each'}, this "
            "one has none (the manifest's rates and AFC_CONFIG's file: is AFC_CONFIG unset "
            "here, or another file?). Its attempts from now on are unpriced (their cost "
            "unknown) and a budget refuses them; submit again with the card to price them"
        )
    if result.admit is not None and result.admit.cards_kept_by:
        holders = result.admit.cards_kept_by
        _err(
            f"batch {result.admit.batch}'s rate cards changed while "
            f"{'afc processes hold' if len(holders) > 1 else 'an afc process holds'} its "
            f"jobs ({', '.join(holders[:4])}{' and more' if len(holders) > 4 else ''}): a run "
            "prices and budgets its attempts by the cards it began with, to its end (an afc "
            "worker, to the end of its round); to apply these now, stop it (Ctrl-C or "
            "SIGTERM) and run 'afc resume'"
        )
    if json_out:
        if not quiet:
            _print_unlisted(result, admitted_only)
        payload: dict[str, Any] = {}
        if result.admit is not None:
            payload["batch"] = result.admit.batch
            payload["storage"] = shown_url(result.admit.storage)
            payload["admitted"] = {
                "new": len(result.admit.new),
                "replayed": len(result.admit.replayed),
                "conflicts": len(conflicts),
            }
            payload["gates_changed"] = result.admit.gates_changed
            payload["gates_kept"] = result.admit.gates_kept
        payload.update(
            {
                "jobs": jobs,
                "counts": result.counts,
                "conflicts": conflicts,
                "spent": format_usd(result.stats.spent_micros),
                "unknown_cost_attempts": result.stats.unknown_cost_attempts,
                "reserved": format_usd(result.stats.reserved_micros),
                "budget": format_usd(result.budget.cap_micros) if result.budget else None,
                "stopped_by_budget": result.stats.budget_hit,
                "interrupted": result.stats.interrupted,
                "abandoned_attempts": result.stats.abandoned,
                "stuck": [job_json(row) for row in result.stuck],
                "unlisted": result.unlisted,
                # null when every event arrived (README), as the summary then says nothing
                "webhooks": result.webhooks if any(result.webhooks.values()) else None,
                "exit_code": result.exit_code if exit_code is None else exit_code,
            }
        )
        emit_json(payload)
        return
    if quiet:
        return
    if result.admit is not None:
        admit = result.admit
        _err(
            f"batch {admit.batch}: {len(admit.new)} new, {len(admit.replayed)} replayed, "
            f"{len(conflicts)} conflicting; storage {shown_url(admit.storage)}"
        )
        if admit.gates_changed:
            _err(changed_message(admit.gates_changed))
    _print_unlisted(result, admitted_only)
    not_ok = [j for j in jobs if j["status"] != "succeeded"]
    if result.stats.interrupted:  # jobs a stop left to do are counted in the tally below
        not_ok = [j for j in not_ok if j["status"] not in ("queued", "waiting")]
    for line in _not_ok_lines(not_ok):
        _err(line)
    _print_stuck(result.stuck)
    _print_webhooks(result.webhooks)
    counts = ", ".join(f"{n} {status}" for status, n in sorted(result.counts.items()))
    # "run here": the jobs this process worked on; the tally is every job the command
    # reports (replayed ones, and ones another afc process finished or holds, included)
    tally = f"of {len(jobs)} job(s): {counts}" if counts else "no jobs"
    _err(f"{result.ran} run here; {tally}; {_spend_line(result.stats, result.budget)}")
    if result.budget is not None and result.stats.spent_micros > result.budget.cap_micros:
        # every attempt this run started fitted the cap by what was reserved for it: either
        # its answer cost more, or requests an earlier run left were polled to their end here
        # (README "Budget"), which no reservation of this run held
        stats, cap = result.stats, result.budget.cap_micros
        why = []
        if stats.adopted_micros:
            why.append(
                f"{format_usd(stats.adopted_micros)} USD of it was requests an earlier run left "
                "rendering, which this run polled to their end (never paid for again; their "
                "cost counts in the run that learns it)"
            )
        if stats.unreserved_micros:
            why.append(
                f"{format_usd(stats.unreserved_micros)} USD of it was attempts of models "
                "without a per-image price, which reserve nothing (--allow-unpriced: their "
                "spend is not capped)"
            )
        if stats.spent_micros - stats.adopted_micros - stats.unreserved_micros > cap:
            why.append(
                "answers cost more than the estimates reserved for them "
                + (
                    "(a card that charges tokens: give it a per_image of at least what an "
                    "image costs in tokens)"
                    if stats.token_priced
                    else "(answers holding more images than asked for: each image is charged)"
                )
            )
        _err(
            f"this run spent {format_usd(stats.spent_micros)} USD, past its budget of "
            f"{format_usd(cap)}: " + "; and ".join(why)
        )
    if result.stats.budget_hit:
        _err(
            f"stopped by the budget of {format_usd(result.budget.cap_micros)} USD: no new "
            "attempt was started past it; every waiting job resumes with 'afc resume'"
        )
    if result.stats.interrupted:
        stats = result.stats
        left = sum(1 for j in jobs if j["status"] in ("queued", "waiting", "running"))
        abandoned = (
            f"{stats.abandoned} call(s) in flight abandoned (recorded as unknown: possibly paid)"
            if stats.abandoned
            else "no call abandoned"
        )
        _err(
            f"interrupted: {stats.finished} job(s) finished in this run, {left} left to do, "
            f"{abandoned}; {_spend_line(stats, result.budget)}. Continue with 'afc resume'."
        )


def _print_budget_elsewhere(result: Any) -> None:
    """Under a budget, the jobs this run left to another live afc process (``run
    .note_held_elsewhere``: an ``afc worker`` of the same ledger, another submit) are said
    to be outside it. A cap holds the calls of the run given it (``Ledger.start_attempt``,
    its run id); the other process renders them under its own ``--max-spend``, or none. A
    manifest with ``budget: "0.05"`` submitted beside a worker said only that its jobs were
    being run by another afc process, and 'this run spent 0.000000 USD', while the worker
    paid for every one of them uncapped (0.15 USD for three), as ``--no-run`` warns."""
    from afc_cli.costs import format_usd, plural
    from afc_cli.errors import named_batches

    elsewhere = [row for row in result.jobs if row.get("held_elsewhere")]
    if result.budget is None or not elsewhere:
        return
    where = "--max-spend" if result.budget.source == "--max-spend" else "the manifest's budget"
    named = named_batches({row["batch"] for row in elsewhere})
    _err(
        f"warning: {where} of {format_usd(result.budget.cap_micros)} USD caps this run's own "
        f"calls: {plural(len(elsewhere), 'job')} of {named} "
        f"{'is' if len(elsewhere) == 1 else 'are'} run by another afc process, under that "
        "process's own budget (an afc worker's --max-spend; none given: no cap), not this one"
    )


def _print_budget_behind_review(result: Any) -> None:
    """Under a budget, the jobs a run left blocked are said to be outside it. A cap holds
    the calls of the run given it, and a job still blocked when the run ends waits for a need
    this run did not finish (a style frame awaiting review, most often): it renders in a later
    run, the next 'afc resume' or an 'afc worker', under that run's own ``--max-spend`` (none
    given: no cap). README's review flow (submit, approve, resume) under ``budget: "0.12"``,
    which the plan said the batch did NOT fit, spent 0.05 in the submit and 0.20 more in the
    resume, neither saying so, where ``--no-run`` warns that its budget caps nothing. Not
    said of a run the budget stopped or that was interrupted: their lines say to resume."""
    from afc_cli.costs import format_usd, plural
    from afc_cli.errors import named_batches

    if result.budget is None or result.stats.budget_hit or result.stats.interrupted:
        return
    behind = [
        row for row in result.jobs if row["status"] == "blocked" and not row.get("held_elsewhere")
    ]
    if not behind:
        return
    where = "--max-spend" if result.budget.source == "--max-spend" else "the manifest's budget"
    named = named_batches({row["batch"] for row in behind})
    review = any(row["status"] == "awaiting_review" for row in result.jobs)
    _err(
        f"warning: {where} of {format_usd(result.budget.cap_micros)} USD caps this run's own "
        f"calls: {plural(len(behind), 'job')} of {named} "
        f"{'is' if len(behind) == 1 else 'are'} left blocked"
        + (" behind a review" if review else " (behind a review, or a need not finished)")
        + ", and the run that renders them once their needs succeed ('afc resume', 'afc "
        "worker') does so under its own --max-spend (none given: no cap), not this budget"
    )


def _retry_commands(stuck: list[dict[str, Any]]) -> list[str]:
    """The ``afc retry`` that selects ``stuck`` (failed and dead-lettered jobs), one per
    batch by its name, with the flag of each status it has there: ``--failed`` selects no
    dead job, and 'afc retry --batch B --failed', given for every such job, answered 'no job
    to retry' (exit 0) for a batch whose jobs were dead-lettered (STORE_FAILED), which
    stayed dead."""
    flags: dict[str, set[str]] = {}
    for row in stuck:
        flags.setdefault(row["batch"], set()).add(row["status"])
    return [
        f"afc retry --batch {batch}"
        + "".join(f" --{status}" for status in ("failed", "dead") if status in statuses)
        for batch, statuses in sorted(flags.items())
    ]


def _print_stuck(stuck: list[dict[str, Any]]) -> None:
    """Failed and dead-lettered jobs that wait for a person: named until one acts, with the
    command that queues them again (``_retry_commands``)."""
    if not stuck:
        return
    from afc_cli.errors import first_named

    names = first_named(
        [f"{r['batch']}/{r['key']} ({r['status']}, {r['error_code']})" for r in stuck], 10
    )
    commands = first_named([f"'{c}'" for c in _retry_commands(stuck)], 3, " batches")
    _err(
        f"{len(stuck)} job(s) failed earlier and wait for a person: {names}. See "
        f"'afc show KEY'; once the cause is fixed, 'afc retry KEY' (or {commands}) queues "
        "them again."
    )


def _print_webhooks(counts: dict[str, int]) -> None:
    """Job events the run could not deliver: said, not left for 'afc webhooks list' to find
    (the exit code stays the jobs': a receiver that is down fails no render)."""
    pending, dead = counts.get("pending", 0), counts.get("dead", 0)
    if pending or dead:
        _err(
            f"webhooks: {pending} event(s) not delivered yet (they go out with the next run or "
            f"'afc webhooks deliver'), {dead} dead (refused, or given up on: 'afc webhooks "
            "replay ID' sends one again, 'afc webhooks replay --dead' all); 'afc webhooks "
            "list' shows them and why"
        )


def _spend_line(stats: Any, budget: Any) -> str:
    """The run's spend as ``afc costs report`` counts it (``priced``); attempts of unknown
    cost apart and never added in, and, under a budget (``budget``), what it holds for them
    (their rate-card estimates). Without a budget reservations mean nothing to a person, so
    nothing is said of them (``--json`` still has ``reserved``)."""
    from afc_cli.costs import format_usd, unknown_cost_part

    line = f"this run spent {format_usd(stats.spent_micros)} USD (priced)"
    line += unknown_cost_part(stats.unknown_cost_attempts)
    if stats.unknown_cost_attempts and budget is not None and stats.reserved_micros:
        them = "it" if stats.unknown_cost_attempts == 1 else "them"
        line += f"; the budget counts {format_usd(stats.reserved_micros)} USD for {them}"
    return line


def _ended_badly(ended_badly: int, cancelled: int) -> str:
    """A worker's line's ' (2 failed, 1 cancelled)': a job a person cancelled while the
    worker held it was said 'failed' (outside audit 55g); --json's ``failed`` counts both."""
    parts = [f"{ended_badly - cancelled} failed"] if ended_badly > cancelled else []
    parts += [f"{cancelled} cancelled"] if cancelled else []
    return f" ({', '.join(parts)})" if parts else ""


NOT_STARTED = "not started; 'afc resume' (or an 'afc worker') runs it"
# A queued job with an attempt of unknown cost (a stopped run's call abandoned in flight,
# released): said 'not started', as if nothing had been paid for it (outside audit 55g)
UNKNOWN_PAID = (
    "not run to its end: an attempt of unknown cost (possibly paid; 'afc show KEY' lists its "
    "attempts); 'afc resume' (or an 'afc worker') runs it"
)
# A job's reason as said of the several jobs of one summary line ('3 jobs queued at probe
# (...): ... runs them'), where the summary says it of one job
OF_SEVERAL = {
    NOT_STARTED: "not started; 'afc resume' (or an 'afc worker') runs them",
    UNKNOWN_PAID: (
        "not run to their end: each has an attempt of unknown cost (possibly paid; 'afc show "
        "KEY' lists its attempts); 'afc resume' (or an 'afc worker') runs them"
    ),
    "it waits for the jobs it needs ('afc show KEY' names them)": (
        "each waits for the jobs it needs ('afc show KEY' names them)"
    ),
    "its output is stored; 'afc review approve KEY' (or reject) decides": (
        "their outputs are stored; 'afc review approve KEY' (or reject) decides each"
    ),
}


def _not_ok_lines(jobs: list[dict[str, Any]], shown: int = 3) -> list[str]:
    """One line per job that did not succeed, except that jobs stopped for the same reason
    (the same message up to its figures: a budget stop, an outage) share one line."""
    from afc_cli.errors import first_named
    from afc_cli.progress import paused_reason, same_message

    groups: dict[tuple[str, str, str], list[tuple[dict[str, Any], str]]] = {}
    for job in jobs:
        why = job["error"]["message"] if job["error"] else job["waiting"] or paused_reason(job)
        if not why and job["status"] == "queued":  # admitted, not run (--no-run, a stop)
            why = UNKNOWN_PAID if job.get("unpriced_attempts") else NOT_STARTED
        groups.setdefault((job["status"], job["step"], same_message(why)), []).append((job, why))
    lines = []
    for (status, step, _), members in groups.items():
        job, why = members[0]
        because = f": {why}" if why else ""
        if len(members) == 1:
            lines.append(f"{job['batch']}/{job['key']}: {status} at {step}{because}")
            continue
        because = f": {OF_SEVERAL.get(why, why)}" if why else ""
        names = first_named([f"{j['batch']}/{j['key']}" for j, _ in members], shown)
        lines.append(
            f"{len(members)} jobs {status} at {step} ({names}; afc status --status "
            f"{status} lists them){because}"
        )
    return lines


def _outlive_output() -> None:
    """A command that pays for calls or posts webhooks: SIGPIPE ignored (a socket's peer that
    hangs up mid-request is a failed call, not the death of the run), and stdout and stderr
    that may fail without failing it (a closed pipe stops a run as a first signal does);
    afc_cli/streams.py."""
    from afc_cli import streams

    streams.guard()


def _ca_file_checked() -> None:
    """A command that calls providers or posts webhooks: an SSL_CERT_FILE that cannot be
    read is refused first, named (``providers.base.require_ca_file``)."""
    from afc_cli.providers.base import require_ca_file

    require_ca_file()


def _prestart_helper() -> None:
    """Boot the file helper (afc_cli/offload.py) while this process imports the run and
    admits jobs, instead of after: the first provider calls wait for its first answer."""
    from afc_cli import offload

    offload.prestart()


@app.command(
    epilog=_examples(
        "afc submit shots.yaml",
        "afc submit shots.yaml --max-spend 25 --concurrency 16",
        "afc submit shots.yaml --no-run     # admit only; 'afc resume' runs them",
        "afc submit shots.yaml --json > run.json",
    )
)
def submit(
    manifest: Annotated[str, typer.Argument(metavar="MANIFEST", help="The job manifest (YAML).")],
    no_run: Annotated[bool, typer.Option("--no-run", help="Admit the jobs, run none.")] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only say what a run would do and cost (afc plan).")
    ] = False,
    max_spend: MaxSpendOpt = None,
    allow_unpriced: AllowUnpricedOpt = False,
    grace: GraceOpt = 30.0,
    ledger: LedgerOpt = DEFAULT_LEDGER,
    storage: StorageOpt = None,
    concurrency: ConcurrencyOpt = DEFAULT_CONCURRENCY,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Admit a manifest's jobs and run every one not yet finished.

    Validates the manifest first (exit 2, nothing written, on any problem); a job whose key and
    request were admitted before is a replay and is not rendered again."""
    if dry_run:
        _plan(manifest, ledger, storage, max_spend, allow_unpriced, json_out, concurrency)
        return
    with _boundary(again=_again()):
        _outlive_output()
        if not no_run:
            _ca_file_checked()
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
            grace_s=grace,
            # an admission's exit code does not depend on its jobs' rows: shown, or not read
            report_jobs=not (no_run and quiet and not json_out),
        )
        # an admission (--no-run) is done when its jobs are in the ledger: 0, or 3 for a
        # conflict; its --json says the code it exits with, not the one a run would have
        code = 0 if no_run and result.exit_code != 3 else result.exit_code
        _print_run(result, json_out, quiet, admitted_only=no_run, exit_code=code)
        raise typer.Exit(code)


@app.command(
    epilog=_examples(
        "afc resume",
        "afc resume --batch trailer-shots --max-spend 10",
        "afc resume -q     # from cron: the exit code says what happened",
    )
)
def resume(
    batch: BatchOpt = None,
    max_spend: MaxSpendOpt = None,
    allow_unpriced: AllowUnpricedOpt = False,
    grace: GraceOpt = 30.0,
    ledger: LedgerOpt = DEFAULT_LEDGER,
    storage: StorageOpt = None,
    concurrency: ConcurrencyOpt = DEFAULT_CONCURRENCY,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Run every unfinished job in the ledger (what cron calls).

    Exits 1 while a job of its scope is failed or dead-lettered (until 'afc retry'): not
    one failed only because a job it needs was rejected or cancelled, which a retry fails
    again at once."""
    with _boundary():
        _outlive_output()
        _ca_file_checked()
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
            grace_s=grace,
        )
        _print_run(result, json_out, quiet)
        raise typer.Exit(result.exit_code)


@app.command(
    epilog=_examples(
        "afc worker --ledger postgresql://afc@db.internal/afc",
        "afc worker --concurrency 32 --batch trailer-shots",
        "afc worker --max-spend 500   # one cap for every worker, never reset",
        'afc worker --until-idle --budget "nightly-$(date +%F)" --max-spend 50',
        "afc worker --until-idle --json   # drain what is runnable, then exit",
    )
)
def worker(
    batch: BatchOpt = None,
    grace: GraceOpt = 30.0,
    ledger: LedgerOpt = DEFAULT_LEDGER,
    concurrency: ConcurrencyOpt = DEFAULT_CONCURRENCY,
    claim: Annotated[
        int | None,
        typer.Option(
            "--claim",
            min=1,
            metavar="N",
            help="Jobs claimed per round (default 4 x concurrency, at least 32).",
        ),
    ] = None,
    poll: Annotated[
        float,
        typer.Option("--poll", metavar="SECONDS", help="Wait between claims when idle."),
    ] = 2.0,
    until_idle: Annotated[
        bool, typer.Option("--until-idle", help="Exit once no runnable job is left.")
    ] = False,
    max_spend: Annotated[
        str | None,
        typer.Option(
            "--max-spend",
            metavar="USD",
            # not this run's, as for submit and resume: every worker's of its --budget
            help="Cap the priced spend of every worker of this --budget on this ledger; stop "
            "starting attempts before it (exit 4).",
        ),
    ] = None,
    allow_unpriced: AllowUnpricedOpt = False,
    budget_name: Annotated[
        str | None,
        typer.Option(
            "--budget",
            metavar="NAME",
            help="Workers given the same name share one --max-spend (default name: "
            "workers), counted from the budget's first attempt and never reset: a new name "
            "starts another (a cap a night: --budget nightly-$(date +%F)).",
        ),
    ] = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    storage: Annotated[
        str | None,
        typer.Option(
            "--storage",
            metavar="URL",
            help="Refuse (exit 2) a batch whose outputs are stored elsewhere: each batch "
            "keeps the storage it was admitted with.",
        ),
    ] = None,
) -> None:
    """Run jobs of any batch until SIGTERM: one worker per machine.

    Claims jobs in rounds, runs them as 'afc resume' does, polls when idle. SIGTERM drains."""
    with _boundary():
        _outlive_output()
        _ca_file_checked()
        _prestart_helper()
        from afc_cli.worker import work

        result = work(
            ledger_path=ledger,
            batch=batch,
            concurrency=concurrency,
            claim=claim,
            poll_s=poll,
            grace_s=grace,
            until_idle=until_idle,
            reporter=_reporter(json_out, quiet, verbose),
            max_spend=max_spend,
            allow_unpriced=allow_unpriced,
            budget_name=budget_name,
            storage=storage,
        )
        if json_out:
            from afc_cli.output import emit_json

            emit_json(result.as_json())
        elif not quiet:
            from afc_cli.costs import format_usd, plural, unknown_cost_part

            sys.stderr.write(
                f"afc: worker claimed {plural(result.claimed, 'job')} in "
                f"{plural(result.rounds, 'round')}; {result.finished} finished"
                + _ended_badly(result.failed, result.cancelled)
                + "; spent "
                f"{format_usd(result.spent_micros)} USD (priced)"
                # its calls of unknown cost, as a run's summary says them (_spend_line)
                + unknown_cost_part(result.unknown_cost_attempts)
                + (f"; {plural(result.abandoned, 'call')} abandoned" if result.abandoned else "")
                + (
                    # the budget's figure is every worker's of that budget, not this one's
                    f"; budget {result.budget['name']!r}: {result.budget['priced']} of "
                    f"{result.budget['cap']} USD priced"
                    + unknown_cost_part(result.budget["unknown_cost_attempts"])
                    if result.budget
                    else ""
                )
                + ("; stopped by the budget" if result.budget_hit else "")
                + (
                    # its exit 130 said in its line too: a script's log read as a worker
                    # that ran the batch out, with jobs left to run
                    "; interrupted before it went idle: jobs are left to run (run it again)"
                    if result.until_idle and result.stopped_by_signal and not result.idle
                    else ""
                )
                + (
                    # a cron line's worker that started nothing reads the spend of the nights
                    # before it: say the budget is never reset, and how to start another; not
                    # when the budget's other workers spent it while this one ran (a new name
                    # then let them spend the cap again)
                    (
                        " its other workers spent while this one ran"
                        if result.budget_at_end > result.budget_at_start
                        else " spent before this worker started (a budget counts every attempt "
                        "of its workers since its first and is never reset: a new --budget NAME "
                        "starts another, say one a night: --budget nightly-$(date +%F))"
                    )
                    if result.budget_hit
                    and not result.spent_micros
                    and not result.unknown_cost_attempts
                    else ""
                )
                + (
                    f"; {result.held_elsewhere} left waiting on another batch's output key"
                    if result.held_elsewhere
                    else ""
                )
                + (
                    f"; {result.awaiting_review} awaiting review ('afc review list'; a "
                    "decision lets the jobs that need them run)"
                    if result.awaiting_review
                    else ""
                )
                + (f"; {result.blocked} blocked on their needs" if result.blocked else "")
                + "\n"
            )
        raise typer.Exit(result.exit_code)


@ledger_app.command(
    "copy",
    epilog=_examples(
        "afc ledger copy afc.db postgresql://afc@db.internal/afc",
        "afc ledger copy postgresql://afc@db.internal/afc sqlite:///back.db --json",
    ),
)
def ledger_copy(
    source: Annotated[str, typer.Argument(metavar="SRC", help="The ledger to copy (path or URL).")],
    destination: Annotated[
        str, typer.Argument(metavar="DST", help="A new or empty ledger (path or URL).")
    ],
    keep_source: Annotated[
        bool,
        typer.Option(
            "--keep-source",
            help="Leave the source able to run jobs (a backup, a test copy): then run only "
            "one of the two, or jobs are paid for in both.",
        ),
    ] = False,
    json_out: JsonOpt = False,
    ledger: UnusedLedgerOpt = None,
    storage: UnusedStorageOpt = None,
    concurrency: UnusedConcurrencyOpt = None,
    quiet: UnusedQuietOpt = False,
    verbose: UnusedVerboseOpt = False,
) -> None:
    """Move a ledger, history included, into a new one (SQLite to PostgreSQL, or back).

    The source is read in one snapshot; the destination is written in one transaction. The
    source is then marked moved: it keeps its history for reading, and the commands that
    run or change jobs refuse it (exit 2), so no job is paid for in both."""
    with _boundary(
        again=_again(),
        why="it finishes a copy cut short, or copies anew one not committed: the copy is one transaction",
    ):
        _interrupt_on_sigterm()
        from afc_cli.ledger.copy import copy_ledger

        result = copy_ledger(source, destination, keep_source=keep_source)
        if json_out:
            from afc_cli.output import emit_json

            emit_json(result)
            return
        # rows by table name ("batches 1", not "1 batches")
        rows = ", ".join(f"{table} {count}" for table, count in result["rows"].items())
        sys.stdout.write(f"copied {result['source']} to {result['destination']}, rows: {rows}\n")
        sys.stdout.write(
            f"{result['source']} is marked moved: it runs and changes nothing from now on "
            "(submit, resume, worker, cancel, retry, reviews and webhooks refuse it), its "
            "history still reads\n"
            if result["source_moved"]
            else f"{result['source']} is kept as it was (--keep-source): run only one of the "
            "two ledgers, or jobs are paid for in both\n"
        )
        if result["spooled_files"]:
            from afc_cli.ledger_file import is_postgres

            # a SQLite ledger's runs read the folder beside it, whatever AFC_SPOOL_DIR says
            where = (
                " (AFC_SPOOL_DIR of the runs on this host, else afc-spool in their working folder)"
                if is_postgres(destination)
                else ""
            )
            files = result["spooled_files"]
            waiting = ("1 file waits" if files == 1 else f"{files} files wait") + (
                f" in {result['spool']}: paid renders, or the ids of requests a provider "
                "still renders; "
            )
            if result["spool"] == result["destination_spool"]:
                # two PostgreSQL ledgers run from one folder: the spool was handed over
                sys.stdout.write(
                    waiting + "it is the destination's spool too: the destination's next run "
                    "here stores or polls them instead of paying for them again\n"
                )
            else:
                sys.stdout.write(
                    waiting + f"move them into {result['destination_spool']}{where} so the "
                    "next run stores or polls them instead of paying for them again\n"
                )


def _plan(
    manifest: str,
    ledger: str,
    storage: str | None,
    max_spend: str | None,
    allow_unpriced: bool,
    json_out: bool,
    concurrency: int = DEFAULT_CONCURRENCY,
):
    with _boundary(reads=ledger):
        from afc_cli.plan import describe, plan

        result = plan(
            manifest,
            ledger_path=ledger,
            storage=storage,
            max_spend=max_spend,
            allow_unpriced=allow_unpriced,
            concurrency=concurrency,
        )
        if json_out:
            from afc_cli.output import emit_json

            emit_json(result)
            for problem in result["environment"]:  # the text above says it on stdout
                _err(f"a submit in this environment would be refused (exit 2): {problem}")
        else:
            sys.stdout.write(describe(result) + "\n")
    if result["problems"]:
        from afc_cli.errors import EXIT_USAGE

        # what the submit would refuse, on stderr too, with the submit's exit code
        for problem in result["problems"]:
            _err(problem)
        raise typer.Exit(EXIT_USAGE)


@app.command(
    "plan",
    epilog=_examples("afc plan shots.yaml", "afc plan shots.yaml --max-spend 25 --json"),
)
def plan_command(
    manifest: Annotated[str, typer.Argument(metavar="MANIFEST", help="The job manifest (YAML).")],
    max_spend: Annotated[
        str | None,
        typer.Option(
            "--max-spend",
            metavar="USD",
            help="Plan a submit with this cap instead of the manifest's budget: say whether "
            "the estimate fits it. Nothing is run.",
        ),
    ] = None,
    allow_unpriced: Annotated[
        bool,
        typer.Option(
            "--allow-unpriced",
            help="As a submit given it: under a budget, models with no rate card are "
            "allowed (their spend uncapped), not refused with exit 2.",
        ),
    ] = False,
    ledger: LedgerOpt = DEFAULT_LEDGER,
    storage: StorageOpt = None,
    json_out: JsonOpt = False,
    concurrency: UnusedConcurrencyOpt = None,
    quiet: UnusedQuietOpt = False,
    verbose: UnusedVerboseOpt = False,
) -> None:
    """Say what a submit would do and cost, writing nothing.

    Per job: new, replayed, already stored or conflicting; the estimated spend and the models
    without a price. Under a budget, exit 2 where the submit would refuse to run (a model that
    may run has no per-image price). Writes nothing: no ledger, no storage, no provider call."""
    _plan(manifest, ledger, storage, max_spend, allow_unpriced, json_out)


@costs_app.command(
    "report",
    epilog=_examples(
        "afc costs report",
        "afc costs report --by model --batch trailer-shots",
        "afc costs report --by day --since 2026-11-01 --csv > spend.csv",
    ),
)
def costs_report_command(
    batch: BatchOpt = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="DATE",
            help="Only attempts since (ISO; UTC unless it gives an offset).",
        ),
    ] = None,
    by: Annotated[
        str,
        typer.Option("--by", metavar="GROUP", help="Group by provider, model, batch or day (UTC)."),
    ] = "provider",
    csv_out: Annotated[bool, typer.Option("--csv", help="CSV on stdout.")] = False,
    ledger: LedgerOpt = DEFAULT_LEDGER,
    json_out: JsonOpt = False,
    storage: UnusedStorageOpt = None,
    concurrency: UnusedConcurrencyOpt = None,
    quiet: UnusedQuietOpt = False,
    verbose: UnusedVerboseOpt = False,
) -> None:
    """Spend by provider, model, batch or day.

    Per group: priced spend, unpriced attempts (real spend is higher), spend on failed
    attempts, attempts of unknown outcome (possibly paid), and renders avoided by stored
    outputs with what they would have cost."""
    with _boundary(reads=ledger):
        from afc_cli.costs_report import FIELDS, costs_report, footer
        from afc_cli.output import emit_csv, emit_json
        from afc_cli.tables import Col, emit

        if json_out and csv_out:  # one document on stdout: which one is the caller's to say
            from afc_cli.errors import UsageError

            raise UsageError("--json and --csv: choose one")
        report = costs_report(ledger, batch=batch, since=since, by=by)
        if report["moved_to"]:  # a spend report (a cron's, an alert's) read the wrong ledger
            _err(
                _moved_line(
                    report["moved_to"],
                    "what its runs spend since is there, and its report holds these "
                    "figures too (the copy took the history)",
                )
            )
        columns = [by, *FIELDS]
        if json_out:
            moved = {"moved_to": report["moved_to"]} if report["moved_to"] else {}
            emit_json({"rows": report["rows"], "total": report["total"], **moved})
        elif csv_out:
            # the total row says so in a last column: a batch may be named "total" too
            emit_csv(
                [
                    *({**row, "row": "group"} for row in report["rows"]),
                    {by: "total", **report["total"], "row": "total"},
                ],
                [*columns, "row"],
            )
        else:
            rows = [*report["rows"], {by: "total", **report["total"]}]
            drop = {"avoided_unpriced": 1, "avoided_renders": 2, "avoided_cost": 3}
            cols = [Col(by)] + [Col(f, right=True, drop=drop.get(f)) for f in FIELDS]
            notes = [n for n in [footer(report)] if n]
            emit(rows, cols, title=f"spend by {by} (USD)", notes=notes, total=True)


YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Act on several jobs without asking.")]


def _ended_needs_said(ended: list[dict[str, Any]]) -> str:
    """What ``afc retry`` says of a job it put back to blocked whose needs still ended badly:
    the next run fails it again at once, and what would let it run."""
    named = ", ".join(f"{n['key']!r} is {n['status'] or 'not in the ledger'}" for n in ended)
    statuses = {n["status"] for n in ended}
    if any(n["status"] == "rejected" and n.get("input") for n in ended):
        # its reference image: part of its request, so the same key naming the replacing job
        # is refused as a conflict (exit 3); needs alone are gates a re-submit may change
        then = (
            "a rejected job is final, and this job sends its output as a reference image (part "
            "of its request: the same key naming another input is refused as a conflict): "
            "submit it under a new key of its own, with inputs naming the key that replaces it"
        )
    elif "rejected" in statuses:
        then = "a rejected job is final: submit this job again needing the key that replaces it"
    elif None in statuses:
        then = "submit this job again needing only jobs the ledger has"
    else:
        then = "retry that need first ('afc retry KEY'), which puts this job back with it"
    plural = "s" if len(ended) > 1 else ""
    return (
        f"its need{plural} {named}: the next run fails it again at once (DEPENDENCY_FAILED); {then}"
    )


def _asker(yes: bool):
    """How a command that selects several jobs gets them confirmed: --yes, or a question on
    a terminal (listing them, on stderr); without either it is refused (exit 2)."""
    if yes:
        return lambda what, jobs: True
    if not sys.stdin.isatty():
        return None

    def ask(what: str, jobs: list[dict[str, Any]]) -> bool:
        for job in jobs[:20]:
            _err(f"  {job['batch']}/{job['key']} ({job['status']})")
        if len(jobs) > 20:
            _err(f"  ... and {len(jobs) - 20} more")
        try:
            # click reads the answer with input(" "), which writes that space to stdout: a
            # '--json > retried.json' began with it. The whole question goes to stderr
            with contextlib.redirect_stdout(sys.stderr):
                return typer.confirm(f"{what} these {len(jobs)} jobs?", default=False, err=True)
        except typer.Abort as exc:
            # click turns a Ctrl-C (a SIGTERM or SIGHUP too: ``_sigterm_as_ctrl_c``) at the
            # question into 'Aborted!', exit 1 (some job failed, README says), not the 130 of
            # an interruption; an end of input (Ctrl-D) is no answer: declined
            if isinstance(exc.__context__, KeyboardInterrupt):
                raise KeyboardInterrupt from None
            _err("")
            return False

    return ask


def _dependents_said(item: dict[str, Any]) -> None:
    """What a cancel or a retry of a job did to the blocked jobs that need it (a style frame
    with a batch behind it): failed with it, or waiting for it again."""
    failed, back = item.get("dependents_failed"), item.get("dependents_blocked")
    if failed:
        _err(
            f"  {_jobs(failed)} that needed it failed (DEPENDENCY_FAILED); 'afc retry "
            f"{item['key']}' puts {'it' if failed == 1 else 'them'} back with it"
        )
    if back:
        _err(f"  {_jobs(back)} that needed it {'waits' if back == 1 else 'wait'} for it again")
    failing = item.get("dependents_failing")
    if failing:
        # put back, but another need of theirs is still rejected, cancelled, failed or dead
        which = "it also needs" if back == 1 else f"{failing:,} of them also need"
        _err(
            f"  {which} a job that ended badly: the next run fails "
            f"{'it' if failing == 1 else 'them'} again at once (DEPENDENCY_FAILED; 'afc show "
            "KEY' names that job)"
        )


def _jobs(count: int) -> str:
    return "1 job" if count == 1 else f"{count:,} jobs"


@app.command(
    cls=KeyCommand,
    epilog=_examples(
        "afc retry shot-001 --batch trailer-shots",
        "afc retry --batch trailer-shots --failed          # lists them, asks",
        "afc retry --batch trailer-shots --dead --yes",
    ),
)
def retry(
    keys: Annotated[
        list[str] | None, typer.Argument(metavar="KEY", help="Keys of the jobs to retry.")
    ] = None,
    batch: BatchOpt = None,
    failed: Annotated[bool, typer.Option("--failed", help="Every failed job of --batch.")] = False,
    dead: Annotated[
        bool, typer.Option("--dead", help="Every dead-lettered job of --batch.")
    ] = False,
    cancelled: Annotated[
        bool, typer.Option("--cancelled", help="Every cancelled job of --batch.")
    ] = False,
    yes: YesOpt = False,
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            metavar="NAME",
            help="Who retries (recorded; default: AFC_USER, else the OS user).",
        ),
    ] = None,
    ledger: LedgerOpt = DEFAULT_LEDGER,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    storage: UnusedStorageOpt = None,
    concurrency: UnusedConcurrencyOpt = None,
    verbose: UnusedVerboseOpt = False,
) -> None:
    """Queue failed, dead-lettered or cancelled jobs again, once their cause is fixed.

    The job keeps its key, request and history; 'afc resume' (or cron) then runs it, looking
    for its stored output first. A succeeded job is never retried; a selection of more than
    one job is listed and confirmed (or --yes)."""
    with _boundary(each="retry"):
        _sigterm_as_ctrl_c()  # a cron job's timeout, a container stopping: exit 130, said so
        from afc_cli.ops import retry as retry_jobs

        statuses = [
            s for s, on in (("failed", failed), ("dead", dead), ("cancelled", cancelled)) if on
        ]
        result = retry_jobs(ledger, keys or [], batch, statuses, by=by, confirm=_asker(yes))
        if json_out:
            from afc_cli.output import emit_json

            emit_json(result)
        elif not quiet:
            from afc_cli.costs import plural
            from afc_cli.errors import first_named

            # each refused edit said beside its job, but thousands (a batch's prompts edited
            # and refused, then retried) said once: one line of each doubled what a retry of
            # 20,000 jobs wrote
            edits = [item for item in result["retried"] if item.get("refused_edit")]
            each_edit = len(edits) <= 5
            for item in result["retried"]:
                if item["status"] == "blocked" and item.get("ended_needs"):
                    _err(
                        f"{item['batch']}/{item['key']}: blocked again (was {item['was']}), but "
                        + _ended_needs_said(item["ended_needs"])
                    )
                elif item["status"] == "blocked":
                    _err(
                        f"{item['batch']}/{item['key']}: blocked again (was {item['was']}): it "
                        "waits for the jobs it needs ('afc show KEY' names them)"
                    )
                else:
                    _err(f"{item['batch']}/{item['key']}: queued again (was {item['was']})")
                if item.get("refused_edit") and each_edit:
                    from afc_cli.conflicts import describe_changes

                    edit = item["refused_edit"]
                    what = describe_changes(edit["changes"]) or "its request changed"
                    _err(
                        f"{item['batch']}/{item['key']}: the retry renders the request admitted "
                        f"for it, not the one a submit refused as a conflict at {edit['at']} "
                        f"({what}); to render that one, cancel this retry ('afc cancel KEY') "
                        "and give the changed request a new key"
                    )
                _dependents_said(item)
            if not each_edit:
                keys_said = first_named([f"{i['batch']}/{i['key']}" for i in edits], 10)
                _err(
                    f"{plural(len(edits), 'retried job')} render the requests admitted for "
                    f"them, not the ones a submit refused as conflicts: {keys_said} ('afc show "
                    "KEY' lists each refused change, '--json' gives them as refused_edit); to "
                    "render those, cancel these retries ('afc cancel KEY') and give each "
                    "changed request a new key"
                )
            for item in result["unchanged"]:
                if item.get("already_retried"):
                    _err(
                        f"{item['batch']}/{item['key']}: already {item['status']} again by an "
                        "earlier retry, left as it is"
                    )
                else:
                    _err(f"{item['batch']}/{item['key']}: now {item['status']}, left as it is")
            if result["retried"] or any(i.get("already_retried") for i in result["unchanged"]):
                _err("run 'afc resume' to render them (or let cron do it)")
            else:
                _err("no job to retry")


@app.command(
    cls=KeyCommand,
    epilog=_examples(
        "afc cancel shot-001 shot-002",
        "afc cancel shot-001 --batch trailer-shots",
        "afc cancel --batch trailer-shots --yes   # every unfinished job",
        "afc cancel shot-007 --batch trailer-shots   # a failed job given up",
    ),
)
def cancel(
    keys: Annotated[
        list[str] | None, typer.Argument(metavar="KEY", help="Keys of the jobs to cancel.")
    ] = None,
    batch: BatchOpt = None,
    yes: YesOpt = False,
    ledger: LedgerOpt = DEFAULT_LEDGER,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    storage: UnusedStorageOpt = None,
    concurrency: UnusedConcurrencyOpt = None,
    verbose: UnusedVerboseOpt = False,
) -> None:
    """Cancel jobs: final until a person retries them (afc retry).

    Cancels the jobs named by KEY, or with only --batch every unfinished job of that batch
    (queued, running, waiting or blocked: one awaiting review is left to its review; listed
    and confirmed first, or --yes). A job rendering on Replicate or fal is cancelled at the
    provider too. A failed or dead-lettered job named by KEY is given up: cancelled, so it
    no longer waits for a person (afc resume's exit 1, queue stats' stuck)."""
    with _boundary(each="cancel"):
        _sigterm_as_ctrl_c()  # a cron job's timeout, a container stopping: exit 130, said so
        from afc_cli.ops import cancel as cancel_jobs

        result = cancel_jobs(ledger, keys or [], batch, confirm=_asker(yes))
        if json_out:
            from afc_cli.output import emit_json

            emit_json(result)
        elif not quiet:
            for item in result["cancelled"]:
                was = f" (was {item['was']}: given up)" if item.get("was") else ""
                _err(f"{item['batch']}/{item['key']}: cancelled{was}")
                _dependents_said(item)
            for item in result["already_final"]:
                _err(f"{item['batch']}/{item['key']}: already {item['status']}, left as it is")
                _dependents_said(item)
            for item in result["not_found"]:
                _err(f"{item['key']}: no such job")
            for item in result["stopped_at_provider"]:
                _err(
                    f"{item['batch']}/{item['key']}: asked {item['provider']} to stop request "
                    f"{item['request']}, which an earlier cancel of the job had not stopped"
                )
            said = ("cancelled", "already_final", "not_found", "stopped_at_provider")
            said += ("completed_at_provider",)
            from afc_cli.costs import plural
            from afc_cli.errors import first_named

            left = result.get("left_to_review") or []
            if not any(result[k] for k in said):
                # 'afc cancel --batch B --yes' on a batch with nothing unfinished said nothing
                _err(f"no {'other ' if left else ''}unfinished job to cancel in batch {batch}")
            if left:
                shown = first_named([item["key"] for item in left], 10)
                whose = "its" if len(left) == 1 else "their"
                _err(
                    f"{plural(len(left), 'job')} awaiting review left to {whose} review: "
                    f"{shown} ('afc review reject KEY --reason TEXT' ends one, as 'afc "
                    "cancel KEY' does; 'afc review list' lists them)"
                )
        for item in result["not_stopped_at_provider"]:
            # said even with -q or --json: the render may go on, and be billed
            _err(
                f"warning: {item['batch']}/{item['key']}: {item['provider']} was not seen to "
                f"stop request {item['request']} ({item['why']}): it may render on and be "
                f"billed; stop it with {item['provider']} itself. The job is cancelled here"
            )
        for item in result["completed_at_provider"]:
            # said even with -q or --json, as above: it was paid for
            what = (
                f"request {item['request']}"
                if item["request"]
                else "render, left at its output URL,"
            )
            _err(
                f"{item['batch']}/{item['key']}: {item['provider']} {what} "
                "had completed before the cancel came (rendered and billed): 'afc retry "
                f"{item['key']}' stores its result without paying for it again, while "
                f"{item['provider']} keeps it"
            )
        if result["not_found"]:
            raise typer.Exit(2)


@queue_app.command(
    "stats",
    epilog=_examples(
        "afc queue stats",
        "afc queue stats --json",
        "afc queue stats --fail-if 'stuck>0'",
        "afc queue stats --fail-if 'oldest_age_seconds>21600'",
    ),
)
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
    json_out: JsonOpt = False,
    storage: UnusedStorageOpt = None,
    concurrency: UnusedConcurrencyOpt = None,
    quiet: UnusedQuietOpt = False,
    verbose: UnusedVerboseOpt = False,
) -> None:
    """Backlog figures for alerting.

    Queued, in flight, delayed, dead-lettered (dlq), failed, stuck (the failed and dead jobs
    that wait for a person, afc retry: not one failed only because a job it needs was
    rejected or cancelled), and the age of the oldest unfinished job in seconds. With
    --fail-if, exit 1 when a condition holds."""
    with _boundary(reads=ledger):
        from afc_cli.ops import failed_conditions, queue_stats

        stats, moved_to = queue_stats(ledger)
        if moved_to:  # an alert on these figures watches the wrong ledger
            _err(_moved_line(moved_to, "its backlog is there"))
        met = failed_conditions(stats, fail_if or [])
        if json_out:
            from afc_cli.jsonout import emit_json  # not output's: it imports the run's modules

            # where the backlog went, as afc status --json says it (an alert's stderr may go
            # nowhere); the piped rows stay the figures alone
            emit_json({**stats, "moved_to": moved_to} if moved_to else stats)
        else:
            # one row a figure, its name and value separated by a tab as every piped row is
            # (``afc queue stats | grep dlq | cut -f2``)
            sys.stdout.write("".join(f"{name}\t{value}\n" for name, value in stats.items()))
        if met:
            _err("alert: " + "; ".join(met))
            raise typer.Exit(1)


def _deliveries_out(stats: Any, json_out: bool, quiet: bool, replayed: int | None = None) -> None:
    from afc_cli.report import _iso

    summary = {
        "delivered": stats.delivered,
        "retrying": stats.retrying,
        "dead": stats.dead,
        "skipped": stats.skipped,
    }
    if json_out:
        from afc_cli.output import emit_json

        # due events another process's live claim kept from this run, and until when
        extra = {} if replayed is None else {"replayed": replayed}
        emit_json(
            {
                **extra,
                **summary,
                "held": stats.held,
                "held_until": _iso(stats.held_until),
                "not_due": stats.not_due,
                "next_due_at": _iso(stats.next_due_at),
            }
        )
    elif not quiet:
        _err(", ".join(f"{n} {k}" for k, n in summary.items()))
    if stats.not_due and not quiet:
        # its line of zeros read as "nothing is waiting" while events waited out their
        # backoff, unsent: a person who just mended a receiver learns when they go
        _err(
            f"{stats.not_due} pending webhook event{'s are' if stats.not_due != 1 else ' is'} "
            f"not due yet (waiting out a retry's backoff), the first at "
            f"{_iso(stats.next_due_at)}: not sent by this run; they go out with the next run "
            "or 'afc webhooks deliver' once due, and 'afc webhooks replay ID' sends one now "
            "('afc webhooks list' shows them and why)"
        )
    if stats.held:
        # said even with -q or --json (as a secret's problem is): all zeros read as "nothing
        # is waiting" while another process's claim kept these events from this run
        _err(
            f"{stats.held} due webhook event{'s are' if stats.held != 1 else ' is'} held by "
            f"another afc process's claim until {_iso(stats.held_until)} (posting them, or "
            "on another host and perhaps dead): not sent by this run; they go out with that "
            "process or with 'afc webhooks deliver' once the claim has run out"
        )
    for name, why in sorted(stats.secret_problems.items()):
        # said even with -q or --json: these events cannot go out until a person sets it
        _err(
            f"webhook events signed with {name} were not sent: {name} {why}; they stay "
            "pending: set it to the receiver's whsec_... secret and run 'afc webhooks deliver'"
        )
    if stats.dead:
        raise typer.Exit(1)


@webhooks_app.command(
    "list", epilog=_examples("afc webhooks list", "afc webhooks list --dead --json")
)
def webhooks_list(
    dead: Annotated[bool, typer.Option("--dead", help="Only dead deliveries.")] = False,
    ledger: LedgerOpt = DEFAULT_LEDGER,
    json_out: JsonOpt = False,
    storage: UnusedStorageOpt = None,
    concurrency: UnusedConcurrencyOpt = None,
    quiet: UnusedQuietOpt = False,
    verbose: UnusedVerboseOpt = False,
) -> None:
    """Webhook deliveries: id, status, tries, last answer, URL.

    The id is whole on every screen; 'afc webhooks replay' takes it or any unique prefix.
    --json adds each delivery's stored envelope."""
    with _boundary(reads=ledger):
        from afc_cli.output import emit_json
        from afc_cli.report import _iso
        from afc_cli.tables import Col, emit
        from afc_cli.webhooks import listing

        deliveries, moved_to = listing(ledger, dead)
        if moved_to:
            # its pending deliveries go out from the ledger they moved to, not from this one
            _err(_moved_line(moved_to, "its webhook deliveries are sent from there"))
        # written as read (``listing``): a ledger of months holds a delivery per job event
        rows = (
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
                "envelope": json.loads(r["envelope"]) if json_out else None,
            }
            for r in deliveries
        )
        if json_out:
            from afc_cli.jsonout import Streamed

            moved = {"moved_to": moved_to} if moved_to else {}
            emit_json({"deliveries": Streamed(rows), **moved})
        else:
            first = next(rows, None)  # an empty table says so (below)
            rows = itertools.chain([first], rows) if first is not None else iter(())
            emit(
                rows,
                [
                    Col("id"),  # ends in the event's name: the event column is spare
                    Col("status"),
                    Col("attempts", header="tries", right=True),
                    Col("last_status", header="HTTP", right=True, drop=3),
                    # why an event waits or went dead is what this view is read for: with
                    # no room as a column (80 columns hold the whole id and little else), it
                    # is printed under the table, "ID: last_error", as afc status's reason is
                    Col("last_error", kind="text", drop=2, below=True),
                    Col("url", kind="text", drop=1),
                    Col("event", drop=0),
                ],
                # an empty table said nothing at all (review list and outputs say why)
                notes=[]
                if first is not None
                else ["no dead deliveries" if dead else "no webhook deliveries"],
            )


@webhooks_app.command(
    "deliver", epilog=_examples("afc webhooks deliver", "afc webhooks deliver -q --json")
)
def webhooks_deliver(
    ledger: LedgerOpt = DEFAULT_LEDGER,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    storage: UnusedStorageOpt = None,
    concurrency: UnusedConcurrencyOpt = None,
    verbose: UnusedVerboseOpt = False,
) -> None:
    """Deliver every due webhook now (for cron); exit 1 if one became dead."""
    with _boundary(again=_again(), why="receivers dedupe on webhook-id", runs=False):
        _sigterm_as_ctrl_c()  # a cron job's timeout: exit 130, as README's codes say
        _outlive_output()
        _ca_file_checked()
        from afc_cli.webhooks import deliver

        _deliveries_out(deliver(ledger), json_out, quiet)


@webhooks_app.command(
    "replay",
    epilog=_examples(
        "afc webhooks replay 2f0c1d9e-5b0a-5d37-9a57-0c6ad3a8a0e4:job.succeeded",
        "afc webhooks replay 2f0c1d     # a unique prefix is enough",
        "afc webhooks replay --dead --batch trailer-shots   # after an outage",
    ),
)
def webhooks_replay(
    delivery_id: Annotated[
        str | None,
        typer.Argument(metavar="ID", help="The delivery's id, or a unique prefix of it."),
    ] = None,
    dead: Annotated[
        bool,
        typer.Option("--dead", help="Every dead event (of --batch B), then every due one."),
    ] = False,
    batch: BatchOpt = None,
    ledger: LedgerOpt = DEFAULT_LEDGER,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    storage: UnusedStorageOpt = None,
    concurrency: UnusedConcurrencyOpt = None,
    verbose: UnusedVerboseOpt = False,
) -> None:
    """Send a dead or delivered event again: its exact envelope, signed afresh."""
    with _boundary(again=_again(), why="receivers dedupe on webhook-id", runs=False):
        from afc_cli.errors import UsageError

        if (delivery_id is None) == (not dead):
            raise UsageError(
                "name one delivery (ID) or every dead one (--dead, with --batch B for one "
                "batch's): 'afc webhooks list --dead' lists them"
            )
        if batch is not None and not dead:
            raise UsageError("--batch goes with --dead: a delivery's ID names its batch")
        _sigterm_as_ctrl_c()
        _outlive_output()
        _ca_file_checked()
        from afc_cli.webhooks import replay, replay_dead

        if delivery_id is not None:
            _deliveries_out(replay(ledger, delivery_id), json_out, quiet)
            return
        count, stats = replay_dead(ledger, batch)
        if not (quiet or json_out):
            if not count:  # nothing sent: no line of zeros
                _err("no dead webhook deliveries" + (f" in batch {batch}" if batch else ""))
                return
            _err(f"{count} dead event(s) queued again with their envelopes")
        # --json in the one shape, whether any was dead or not
        _deliveries_out(stats, json_out, quiet, replayed=count)


@app.command(
    epilog=_examples(
        "afc status                      # counts, then the jobs that need attention",
        "afc status --all                # every job",
        "afc status --status failed --batch trailer-shots",
        "afc status | grep waiting       # tab-separated rows on a pipe",
        "afc status --json",
    )
)
def status(
    batch: BatchOpt = None,
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--status",
            metavar="S",
            help="Only jobs with this status (repeat or comma-separate: failed,dead).",
        ),
    ] = None,
    everything: Annotated[
        bool, typer.Option("--all", help="Every job, not only those that need attention.")
    ] = False,
    ledger: LedgerOpt = DEFAULT_LEDGER,
    json_out: JsonOpt = False,
    storage: UnusedStorageOpt = None,
    concurrency: UnusedConcurrencyOpt = None,
    quiet: UnusedQuietOpt = False,
    verbose: UnusedVerboseOpt = False,
) -> None:
    """Counts by status, then the jobs that need attention.

    Jobs that need attention are dead-lettered, failed, waiting (with the reason) and
    running ones, then those awaiting review, blocked or rejected: every job but the
    succeeded, queued and cancelled ones. --all lists every job, --status S only those with
    status S. --json holds every job of the scope (or those of --status) and the counts."""
    with _boundary(reads=ledger):
        from afc_cli.costs import cost_cell
        from afc_cli.listing import QUIET, counts_line, needing_attention, status_view
        from afc_cli.output import emit_json
        from afc_cli.tables import Col, emit

        # --json holds every job of the scope (or those of --status); it, and --all or
        # --status on a pipe, are written as read: a ledger of months holds 100,000s of jobs
        streamed = json_out or (not sys.stdout.isatty() and (everything or bool(only)))
        view = status_view(
            ledger, batch=batch, statuses=only, everything=everything or json_out, stream=streamed
        )
        rows, counts = view["jobs"], view["counts"]
        moved_to = view.get("moved_to")
        if moved_to:
            # its unfinished jobs are not stuck here: they run in the ledger they moved to
            _err(_moved_line(moved_to, "its jobs run there"))
        if json_out:
            from afc_cli.jsonout import Streamed

            def unreasoned(rows: Any) -> Any:
                for row in rows:
                    del row["reason"]
                    yield row

            moved = {"moved_to": moved_to} if moved_to else {}
            emit_json({"jobs": Streamed(unreasoned(rows)), "counts": counts, **moved})
            return
        one_batch = view["batches"][0] if len(view["batches"]) == 1 else None

        def costed(rows: Any) -> Any:
            for row in rows:
                row["cost"] = cost_cell(row["cost"], row["unpriced_attempts"])
                yield row

        if streamed:  # a pipe's lines, one row at a time
            shown = costed(rows)
        else:
            shown = list(costed(needing_attention(rows) if view["attention"] else rows))
        head = counts_line(counts, one_batch or batch)
        notes = []
        # the jobs not listed are counted, not read (listing.status_view)
        hidden = {s: counts[s] for s in QUIET if counts.get(s)} if view["attention"] else {}
        if hidden:
            listed = ", ".join(f"{n} {s}" for s, n in hidden.items())
            notes.append(f"not listed: {listed} (afc status --all lists every job)")
        columns = [
            Col("key"),
            Col("status"),
            Col("step", drop=2),
            Col("attempts", header="tries", right=True, drop=3),
            Col("cost", right=True),
            # the reason is what a person reads this view for: it keeps room before the output key
            Col("reason", kind="text", drop=4, least=30, below=True),
            Col("output_key", kind="tail", drop=1),
        ]
        if one_batch is None:
            columns.insert(0, Col("batch"))
        _emit_with_head(head, shown, columns, notes, emit)


def _emit_with_head(head: str, rows: Any, columns: list, notes: list[str], emit: Any) -> None:
    """The counts come first: above the table on a terminal; on a pipe, where stdout holds
    only the header line and the rows, on stderr."""
    if sys.stdout.isatty():
        sys.stdout.write(head + "\n")
        sys.stdout.flush()
        if rows:
            emit(rows, columns, notes=notes, group="batch")
        else:
            for note in notes:
                sys.stdout.write(note + "\n")
        return
    sys.stderr.write(head + "\n")
    emit(rows, columns, notes=notes)


@app.command(
    epilog=_examples(
        "afc outputs",
        "afc outputs --batch trailer-shots --json > outputs.json",
        "afc outputs --batch trailer-shots | tail -n +2 | cut -f2  # paths or URLs",
    )
)
def outputs(
    batch: BatchOpt = None,
    ledger: LedgerOpt = DEFAULT_LEDGER,
    json_out: JsonOpt = False,
    storage: UnusedStorageOpt = None,
    concurrency: UnusedConcurrencyOpt = None,
    quiet: UnusedQuietOpt = False,
    verbose: UnusedVerboseOpt = False,
) -> None:
    """The stored outputs: key, path or URL, size, SHA-256, cost.

    What to hand to an edit suite. The path is given for file:// storage, the URL for every
    storage; --json adds the batch, output key, model and prompt, and unpriced_attempts (the
    attempts of unknown cost that the cost leaves out).

    Listed as the ledger recorded them, stored and verified: storage is not looked at, so an
    output deleted since is still listed ('afc retry KEY' looks for a succeeded job's output
    and says whether it is gone)."""
    with _boundary(reads=ledger):
        from afc_cli.costs import cost_cell
        from afc_cli.listing import each_output, output_storages
        from afc_cli.output import emit_json
        from afc_cli.storage import object_path
        from afc_cli.tables import Col, emit

        if json_out:
            from afc_cli.jsonout import Streamed

            # written as read: a ledger of months holds 100,000s of outputs
            emit_json({"outputs": Streamed(each_output(ledger, batch=batch))})
            return
        # the batches with an output, and their storage, from the batches' rows: on a pipe
        # the rows are written as read (a ledger of months holds 100,000s of outputs)
        storages = output_storages(ledger, batch=batch)
        batches = set(storages)
        local = [object_path(url, "") is not None for url in storages.values()]
        where = "path" if all(local) else "url" if not any(local) else "path_or_url"
        on_terminal = sys.stdout.isatty()

        def shown(rows: Any) -> Any:
            for row in rows:
                if row["batch"] not in storages:
                    # its first output came after the layout was chosen (a run writing): not
                    # listed without the batch column it needs, as of that read
                    continue
                row[where] = row["path"] or row["url"]
                if on_terminal and row["path"]:
                    # a person reads (and copies) the short form; a pipe and --json get it whole
                    relative = os.path.relpath(row["path"])
                    row[where] = relative if not relative.startswith("..") else row["path"]
                row["cost"] = cost_cell(row["cost"], row["unpriced_attempts"])
                yield row

        rows = shown(each_output(ledger, batch=batch))
        if on_terminal:
            rows = list(rows)
        columns = [
            Col("key"),
            Col(where, kind="text"),  # wraps on a narrow terminal, never shortened
            Col("size", right=True, drop=2),
            Col("sha256", drop=1),
            Col("cost", right=True),
        ]
        if len(batches) > 1:
            columns.insert(0, Col("batch"))
        emit(rows, columns, notes=[] if storages else ["no stored outputs yet"], group="batch")


@app.command(
    cls=KeyCommand,
    epilog=_examples(
        "afc show shot-001",
        "afc show shot-001 --batch trailer-shots --json",
    ),
)
def show(
    key: Annotated[str, typer.Argument(metavar="KEY", help="The job's idempotency key.")],
    batch: BatchOpt = None,
    ledger: LedgerOpt = DEFAULT_LEDGER,
    json_out: JsonOpt = False,
    storage: UnusedStorageOpt = None,
    concurrency: UnusedConcurrencyOpt = None,
    quiet: UnusedQuietOpt = False,
    verbose: UnusedVerboseOpt = False,
) -> None:
    """One job's whole story.

    Its request, steps, every attempt (provider, model, class, HTTP status, wait, duration,
    usage, cost and source), its output and its events."""
    with _boundary(reads=ledger):
        from afc_cli.report import job_story, print_story

        story = job_story(ledger, key, batch)
        if json_out:
            from afc_cli.output import emit_json

            emit_json(story)
        else:
            print_story(story)


from afc_cli.cli_review import review_app  # noqa: E402 - it uses the helpers above

app.add_typer(review_app, name="review")


def _closed_streams_to_devnull() -> None:
    """A standard stream started closed (``afc resume 2>&-`` in a crontab, a supervisor that
    closes them) is /dev/null: its output is dropped and the command runs, as on a terminal
    that went away. Python leaves ``sys.stderr`` None then, and afc stopped at its first
    message, exit 1, saying nothing and running nothing, or wrote its --json to None after the
    run ('a bug in afc'); and the descriptor was free for the next file afc opened (an output
    being written, a spool file) to take as stdout or stderr."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            if getattr(sys, name) is None:
                setattr(sys, name, open(fd, mode, encoding="utf-8", closefd=False))


# environment variables whose values afc records in the ledger as text (owner.host_id,
# ops.who): read as UTF-8, as the arguments are
NAMES_FROM_ENV = ("AFC_HOST_ID", "AFC_USER")


def _before_it_began() -> None:
    """A stop while typer built and read the command line, after afc_cli/__main__.py's and
    before the command began (20 ms of a quiet machine's start, a third of it), is said as
    one a moment earlier is: it ended in exit 130 without a word (typer's own, or ``main``'s
    for a signal as the command ended). Once a command entered its boundary, that said it."""
    if _began:
        return
    with contextlib.suppress(AttributeError, OSError, ValueError):  # no stderr, or closed
        sys.stderr.write("afc: interrupted before the command began; nothing was changed\n")


def main() -> None:
    # Reading a SIGPIPE'd pipe (afc status | head) should end quietly.
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    _closed_streams_to_devnull()
    os.environ.setdefault("PYTHONIOENCODING", "utf-8")
    # An output encoding that cannot write a prompt's text (PYTHONIOENCODING=ascii, a C
    # locale) degrades it to backslash escapes (caf\xe9), as stderr does by default: never a
    # UnicodeEncodeError after the work is done. --json is ASCII already (json.dumps).
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError):  # replaced or closed streams
            stream.reconfigure(errors="backslashreplace")
    # Bytes the locale could not decode (surrogate escapes), in an argument or in a name afc
    # writes into the ledger as text (a lease's owner, a decision's author: NAMES_FROM_ENV),
    # were 'unexpected error: UnicodeEncodeError' (exit 1) at the first claim, after the
    # submit's jobs were admitted, or at a review's decision: refused before any command.
    texts = [
        (f"argument {n}", arg, "afc reads its arguments as UTF-8")
        for n, arg in enumerate(sys.argv[1:], 1)
    ]
    texts += [
        (
            name,
            os.environ.get(name, ""),
            "afc records it in the ledger as UTF-8: set it in UTF-8, or unset it",
        )
        for name in NAMES_FROM_ENV
    ]
    for label, text, why in texts:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            _err(f"{label} ({shown}) is not UTF-8 text; {why}")
            sys.exit(2)
    from afc_cli.cli_coercion import install

    install()  # plain options coerced without pydantic (afc_cli/cli_coercion.py)
    try:
        app(prog_name="afc")  # "afc" in help and usage, also under python -m afc_cli
    except KeyboardInterrupt:  # a signal just as the command ended, outside its boundary
        _before_it_began()
        sys.exit(130)
    except SystemExit as exc:
        if exc.code == 130:  # typer's for a KeyboardInterrupt as it read the command line
            _before_it_began()
        _flush_stdout(exc.code)
        raise
    except OSError as exc:  # help or the version written to a full disk: one line, exit 1
        if os.environ.get("AFC_DEBUG"):
            raise
        # the rest of the help, left in stdout's buffer, to /dev/null: Python's own flush of
        # it at exit failed again after this line ('Exception ignored in: ...'), exit 120
        from afc_cli.jsonout import _not_written

        _not_written(exc)
        _err(f"{exc}; nothing was changed")
        sys.exit(1)
    finally:
        _settled()  # the command is over, its exit code decided


def _flush_stdout(code: Any = 0) -> None:
    """Write out what is left in stdout's buffer as the command ends, or say once that it
    could not be written (exit 1, or the command's own ``code`` when it failed already). A
    table or listing written to a file on a full disk, by a crontab or a script (stdout
    buffered), failed at Python's own flush after the command:
    'Exception ignored in: <_io.TextIOWrapper name='<stdout>'...> OSError: [Errno 28] No
    space left on device', and exit 120, a code README does not document. The rest goes to
    /dev/null (``jsonout._not_written``, as a --json result's does)."""
    from afc_cli.jsonout import _not_written

    try:
        sys.stdout.flush()
    except ValueError:  # a stdout closed: nothing to write to
        return
    except OSError as exc:
        _not_written(exc)
        fix = "free space where it goes" if exc.errno == errno.ENOSPC else "mend where it goes"
        _err(
            f"the output could not be written to stdout ({exc.strerror or exc}); what the "
            f"command did is done (a command that only reads changed nothing): {fix}, then "
            "run it again to see it"
        )
        sys.exit(code if isinstance(code, int) and code else 1)


# afc report --html and afc serve: their module attaches them to ``app`` (afc_cli/cli_pictures.py)
from afc_cli import cli_pictures  # noqa: E402, F401
