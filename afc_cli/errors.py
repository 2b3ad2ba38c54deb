"""Domain errors. Library code raises these; the CLI boundary maps them to exit codes.

Exit codes (the README documents them):
    0  every requested job ended succeeded (or was already stored), or awaits a review
       (or is blocked behind one): a person's pause is not a failure
    1  some job failed, was cancelled or rejected, or is still waiting (for example on storage)
    2  usage or manifest error: nothing was written
    3  idempotency conflict: conflicting jobs refused, the others still ran (3 wins over 1)
    4  stopped by the spending budget: all work resumable
  130  interrupted: all work resumable
"""

from __future__ import annotations

import signal
from collections.abc import Collection, Sequence

EXIT_OK = 0
EXIT_JOB_FAILED = 1
EXIT_USAGE = 2
EXIT_CONFLICT = 3
EXIT_BUDGET = 4
EXIT_INTERRUPTED = 130

# What interrupts a run (a drain, then exit 130): Ctrl-C, SIGTERM (a stopped cron job or
# container), and SIGHUP, the terminal hanging up (an ssh connection dropped under an
# ``afc submit`` started by hand). SIGHUP's default, death on the spot, abandoned every call
# in flight as possibly paid (exit 129), where a drain records and stores what they return.
# Not SIGHUP when it came ignored (``nohup afc submit ...``): a run started so is meant to
# outlive its terminal, and goes on ignoring it. Read when this module is first imported,
# before afc installs any handler of its own.
STOP_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP")
    if hasattr(signal, name)
    and not (name == "SIGHUP" and signal.getsignal(signal.SIGHUP) == signal.SIG_IGN)
)


class AfcError(Exception):
    """An expected error: shown to the user as one message, never as a traceback."""

    exit_code = EXIT_JOB_FAILED

    def __init__(self, message: str):
        from afc_cli.secrets import scrub, visible

        # it may quote outside text: never a secret in it, nor a terminal's escape sequence
        message = visible(scrub(message))
        super().__init__(message)
        self.message = message


class UsageError(AfcError):
    """Bad options or a refused request (e.g. a batch pointed at a second storage)."""

    exit_code = EXIT_USAGE


# a problem quoting a field's value is cut to this many characters, its head (the file, the
# job, the field) and its tail (the reason, often after the value) kept: a value of megabytes
# (a base64 picture or a log a script put in a field) was quoted whole, a problem each
MAX_PROBLEM_CHARS = 2_000


def shortened_problem(problem: str) -> str:
    if len(problem) <= MAX_PROBLEM_CHARS:
        return problem
    head, tail = MAX_PROBLEM_CHARS * 2 // 3, MAX_PROBLEM_CHARS // 4
    left = len(problem) - head - tail
    return f"{problem[:head]} ... ({left:,} characters left out) ... {problem[-tail:]}"


class ManifestError(UsageError):
    """The manifest is invalid. Raised before anything is written to the ledger."""

    def __init__(self, path: str, problems: list[str], what: str = "manifest"):
        self.path = path
        self.problems = problems = [shortened_problem(p) for p in problems]
        listed = "\n".join(f"  - {p}" for p in problems)
        # ``what``: the kind of file, as the user knows it ("AFC_CONFIG rate file")
        super().__init__(f"invalid {what} {path}:\n{listed}")


class StopsRun(AfcError):
    """One job's failure after which the run stops as at a first signal, the ledger being
    sound: no new provider call starts, and the calls in flight finish and are recorded with
    their cost rather than cancelled into ``unknown`` (``run._all_done``). ``reason`` says
    why in the run's stopping line."""

    reason = "a job failed"


class SpoolError(StopsRun):
    """A render's bytes could not be made durable on this machine (disk full, permissions, the
    file helper gone): the run stops, with the paid attempt recorded."""

    reason = "a rendered output could not be spooled"

    def __init__(self, message: str, job: str | None = None):
        super().__init__(message)
        self.job = job  # whose render it was ("batch/key"), for ``besides``

    def besides(self, others: list[SpoolError]) -> SpoolError:
        """This error, saying also the other paid renders that could not be kept: the calls
        in flight when the first write failed finish, and their writes meet the same full
        disk. Only the first was said: a run that lost 12 paid renders named one, and the
        others were told nowhere but in each job's events."""
        named = [other.job for other in others if other.job]
        shown = first_named(named, 3)
        count = len(others)
        return SpoolError(
            f"{self.message} {count} more paid render{'' if count == 1 else 's'} could not be "
            f"kept either{f' ({shown})' if shown else ''}: each is recorded with its cost, "
            "and 'afc resume' renders it again, or fetches it again while its provider keeps "
            "it ('afc show KEY' says which).",
            job=self.job,
        )


class SpoolUnreadable(SpoolError):
    """A job's spool file, left by an earlier attempt, could not be read (``pipeline.render``):
    it may hold a render already paid for, so the job is not rendered again, and the run stops
    as for a spool that cannot be written. Its stopping line said 'a rendered output could not
    be spooled', a paid render lost, where nothing was rendered and the file is where it was
    (tests/test_audit54e_spool_unreadable_reason.py)."""

    reason = "a spool file could not be read"


class AnswerNotRead(StopsRun):
    """A provider call ended in an exception that is not a ``ProviderError``: afc's adapter
    could not read the answer (a bug in afc, or an API that changed). The attempt is recorded
    failed with its cost unknown, and the run stops rather than pay for more answers it may
    not read either."""

    reason = "a provider's answer could not be read"


class LedgerError(AfcError):
    """The ledger cannot be opened or is not an afc ledger."""

    exit_code = EXIT_USAGE


class LedgerUnreachable(LedgerError):
    """A PostgreSQL ledger afc could not connect to, or lost as it opened (a server down or
    restarting, a network outage, a refused login): exit 1, as a storage that cannot be
    reached before a run and a connection lost mid-run are, not 2. Nothing was written; run
    it again once the server answers. A URL afc can tell is wrong without connecting is a
    ``UsageError`` (exit 2)."""

    exit_code = EXIT_JOB_FAILED


class LedgerWriteError(AfcError):
    """A write to the ledger failed during a run (a full disk, an I/O error): the run stops.
    Exit 1, not 2: admission and attempts may already be written; the ledger is as of its
    last commit, and every job resumes from there. The run stops as at a first signal
    (``run._all_done``): no new call starts, and the calls in flight finish within the grace
    period, their renders kept in the spool for the next run (``pipeline.keep_rendered``)."""

    reason = "the ledger cannot be written"


def batch_key_hint(key: str) -> str:
    """A key given as afc prints a job, ``BATCH/KEY`` (``afc: trailer/shot-001: ended
    failed``), found no job: a key has no '/'; what to write instead, or ''."""
    of, slash, own = key.partition("/")
    if not slash or not of or not own or "/" in own:
        return ""
    return f" (afc prints a job as BATCH/KEY; name it as KEY --batch BATCH: {own} --batch {of})"


SHOWN_BATCHES = 8


def several_batches(names: list[str]) -> str:
    """The batches a refused key is in, as a refusal names them (``names`` oldest first, each
    as the message writes it): every one up to eight; beyond, the eight newest and how many
    older. A studio's ``shot-001`` is in every batch it ran over months, and the refusal of
    ``afc show shot-001`` named all of them: a line of thousands of characters for 300
    batches, once per key named."""
    if len(names) <= SHOWN_BATCHES:
        return ", ".join(names)
    newest = ", ".join(reversed(names[-SHOWN_BATCHES:]))
    return f"{newest}, newest first, and {len(names) - SHOWN_BATCHES} older"


def first_named(names: Sequence[str], shown: int, more: str = "") -> str:
    """``a, b, c and 4 more``: the first ``shown`` of what a message names, then how many it
    left out (``more`` follows that count), so a batch of thousands is not one line of every
    key. Names them all when they are no more than ``shown``."""
    rest = f" and {len(names) - shown} more{more}" if len(names) > shown else ""
    return ", ".join(names[:shown]) + rest


def named_batches(names: Collection[str], shown: int | None = None) -> str:
    """``batch b1``, ``batches b1, b2``: batches a message names, sorted; ``shown``: at most
    that many, then how many more."""
    named = sorted(names)
    listed = first_named(named, len(named) if shown is None else shown)
    return f"batch{'es' if len(named) > 1 else ''} {listed}"


def first_line(exc: object) -> str:
    """An error's message in one line: libpq adds lines of its own ("This probably means the
    server terminated abnormally...") to a lost connection's."""
    return (str(exc).strip().splitlines() or [""])[0]


class FrozenSession(Exception):
    """A PostgreSQL ledger's connection lost after a run loop's transaction had stayed open
    for a whole lease: the server ended the session (``idle_in_transaction_session_timeout``,
    ``PostgresLedger.write_error``), the process having been stopped that long."""


def ledger_write_error(path: object, exc: object) -> LedgerWriteError:
    if isinstance(exc, LedgerWriteError):
        # worded already (a group commit's failure kept for the run's next write): said once
        return exc
    why = first_line(exc).rstrip(".")
    if isinstance(exc, FrozenSession):
        # nothing wrong with the server or the network: the process itself was not running
        fix = (
            "nothing is wrong with the server or the connection: keep afc from being stopped "
            "that long, or raise AFC_LEASE_S"
        )
    elif str(path).startswith(("postgresql:", "postgres:")) and _lock_wait(exc):
        # another session held a row or table afc needed past its lock_timeout
        # (postgres.LOCK_WAIT_S): the server and the connection are fine
        fix = (
            "another session held a lock on the ledger's jobs too long (a psql session left "
            "in a transaction, an 'afc ledger copy' under way, a re-submit changing the needs "
            "of a batch's many thousands of jobs, a newer afc migrating the ledger, which "
            "takes minutes on a large one: pg_stat_activity shows it, afc's own with "
            "application_name 'afc'): let it end or end it (afc runs or workers writing the "
            "same jobs without a pause, as a re-submit changes their webhook, input files or "
            "gates: try again)"
        )
    elif str(path).startswith(("postgresql:", "postgres:")) and _cancelled(exc):
        # the server cancelled the statement: a statement_timeout set for the server, the
        # database or afc's role (shorter than a wait afc bounds itself, or than a large
        # ledger's read), or an administrator's pg_cancel_backend; nothing is wrong with it
        fix = (
            "the server cancelled the statement (a statement_timeout set on the server, the "
            "database or afc's role, or pg_cancel_backend): unset it for afc's role (ALTER "
            "ROLE ... SET statement_timeout = 0) or raise it"
        )
    elif (
        str(path).startswith(("postgresql:", "postgres:"))
        and _no_privilege(exc)
        and ("for sequence" in why)
    ):
        # an 'afc ledger copy' puts rows in with their ids, then sets where each table's ids
        # continue (setval), which needs UPDATE on its sequence: a role given the tables alone
        # was told to grant the tables it had
        fix = (
            "the role afc connects as may not set where the ledger's ids continue (a copy "
            "writes each row with its id, then moves each table's sequence past them): grant "
            "it (GRANT USAGE, UPDATE ON ALL SEQUENCES IN SCHEMA ...) or copy as the role that "
            "owns the ledger's tables"
        )
    elif str(path).startswith(("postgresql:", "postgres:")) and _no_privilege(exc):
        # the role afc connects as may not write a table of the ledger: a REVOKE, or a table
        # a newer afc's migration made after the role's grant (m019's run_spend, written by
        # every attempt under a budget), which "lost a privilege (a REVOKE?)" misnamed
        fix = (
            "the role afc connects as lacks a privilege on a table of the ledger (revoked, or "
            "a table an upgrade of afc made after the role's grant): grant it (GRANT SELECT, "
            "INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ..., again after each upgrade, or "
            "ALTER DEFAULT PRIVILEGES FOR ROLE <the tables' owner> ... once)"
        )
    elif str(path).startswith(("postgresql:", "postgres:")):
        fix = "check the database server and the connection to it"
    elif "full" in why:
        fix = "free space on its disk"
        spill = _spill_folder(path)
        if spill is not None:
            # a big sort (a report's GROUP BY) spills to SQLite's temporary folder: a /tmp
            # that is full (a container's small tmpfs) was said as the ledger's disk
            fix += (
                f", or in {spill}, where SQLite keeps the temporary file of a big sort "
                "(TMPDIR, or SQLITE_TMPDIR, names another folder)"
            )
    elif "locked" in why or "busy" in why:
        # another process held SQLite's write lock past the busy timeout (a sqlite3 shell in
        # a transaction, say): nothing is wrong with the disk
        fix = (
            "another process held the ledger's write lock too long (a sqlite3 shell or a "
            "script in an open transaction? a newer afc migrating the ledger, which takes "
            "minutes on a large one?): end it, or let the migration end"
        )
    else:
        fix = "fix the disk or file system"
    where = f"the ledger {path}" if path else "the ledger"
    error = LedgerWriteError(
        f"cannot write to {where}: {why}. The run stopped; every job stays "
        f"resumable as of the last commit: {fix}, then run 'afc resume'"
    )
    # what a change written in one transaction outside a run (a review decision:
    # review.NotDecided) says instead of the run's words: what failed, and its fix
    error.failed, error.fix = f"cannot write to {where}: {why}", fix
    # what a command that only reads says (cli's ``reads``): the same cause, read, not written
    error.unread = f"cannot read {where}: {why}"
    return error


def _spill_folder(path: object) -> str | None:
    """SQLite's temporary folder (``ledger_file.sqlite_temp_folder``) where it is on another
    file system than the SQLite ledger at ``path`` and that ledger's disk is not the full one
    (or the ledger is not known here)."""
    import os
    from pathlib import Path

    from afc_cli.ledger_file import _no_room, sqlite_temp_folder

    folder = sqlite_temp_folder()
    if folder is None or (path is not None and _no_room(Path(str(path)))):
        return None
    try:
        if (
            path is not None
            and os.stat(folder).st_dev
            == os.stat(os.path.dirname(os.path.abspath(str(path)))).st_dev
        ):
            return None
    except OSError:
        pass
    return os.path.abspath(folder)


# what a refusal of a name this system's file names cannot hold tells the user to do
UTF8_LOCALE = "run afc under a UTF-8 locale (LANG=C.UTF-8)"


def unnamable_here(text: str) -> str | None:
    """Why this system cannot name a file ``text``, or None: a locale that is not UTF-8
    (ISO-8859-1, or C without Python's UTF-8 mode) cannot hold a name in another script
    ('参考.png', '出力/a.png'), and every look at such a path raises UnicodeEncodeError."""
    import os
    import sys

    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        return (
            f"this system's file names are {sys.getfilesystemencoding()} (its locale: LANG, LC_ALL)"
        )
    return None


def _lock_wait(exc: object) -> bool:
    """A PostgreSQL statement that gave up waiting for a lock (``lock_timeout``)."""
    return getattr(exc, "sqlstate", None) == "55P03"


def _no_privilege(exc: object) -> bool:
    """A PostgreSQL statement refused for want of a privilege (``insufficient_privilege``)."""
    return getattr(exc, "sqlstate", None) == "42501"


def _cancelled(exc: object) -> bool:
    """A PostgreSQL statement the server cancelled (``statement_timeout``, pg_cancel_backend)."""
    return getattr(exc, "sqlstate", None) == "57014"


def unwritten(exc: BaseException, path: object = None) -> LedgerWriteError | None:
    """An error met writing a ledger outside a run (a review decision, a copy, a retry), as
    ``ledger_write_error`` words it, with ``failed`` and ``fix`` apart for the command to say
    in its own words: a SQLite error, or a ledger write error worded already; None for any
    other error."""
    import sqlite3

    if isinstance(exc, LedgerWriteError):
        return exc if hasattr(exc, "failed") else None
    if isinstance(exc, sqlite3.Error):
        return ledger_write_error(path, exc)
    return None


class StorageError(AfcError):
    """A storage operation failed. ``retryable`` tells the store policy whether to try again."""

    def __init__(self, message: str, *, retryable: bool = True, retry_after: float | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after

    def __reduce__(self):  # pickles whole (file work returns errors from a helper process)
        return (_storage_error, (self.message, self.retryable, self.retry_after))


def _storage_error(message: str, retryable: bool, retry_after: float | None) -> StorageError:
    return StorageError(message, retryable=retryable, retry_after=retry_after)


class StorageDenied(StorageError):
    """A write the store refused for want of permission (S3's 403 AccessDenied on an upload:
    a role without s3:PutObject on the prefix, or without kms:GenerateDataKey for the
    bucket's default encryption), or as a request it does not support (501 NotImplemented:
    an S3-compatible store without create-only writes or SHA-256 checksums, which every afc
    upload makes). Not retried; and the check before a run, the bucket's HEAD, cannot see
    it, so a run whose upload was so refused renders no other job of that batch
    (``pipeline._storage_broke``)."""

    def __init__(self, message: str, large_only: bool = False):
        super().__init__(message, retryable=False)
        # refused only as a multipart upload's request (an output over 64 MiB): the batch's
        # smaller outputs go up in one request, which the store may take
        self.large_only = large_only

    def __reduce__(self):
        return (StorageDenied, (self.message, self.large_only))


class StorageUnreachable(StorageError):
    """A storage call that found no connection to its store (refused, reset, timed out): the
    store, not the object, is at fault, so a reader of many objects (``afc report``'s
    thumbnails) stops asking it for the others."""

    def __reduce__(self):
        return (StorageUnreachable, (self.message,))


class OutputKeyConflict(AfcError):
    """The output key holds an object that another job (or something else) wrote."""

    code = "OUTPUT_KEY_CONFLICT"
