"""The SQLite backend of the ledger: one file, through sqlite3 (sqlite-utils applies migrations).

Durability: the ledger runs in WAL mode with ``synchronous=NORMAL``, which survives any process
crash (SIGKILL included) with every committed transaction intact. The one write whose loss on a
power cut would cost money unrecorded, the attempt row committed before a paid provider call,
is synced to disk before the call: alone with ``synchronous=FULL`` (``tx(durable=True)``), or,
in a run loop, in the shared commit that the jobs starting together await, which then also
syncs the WAL file (``tx(sync_on_commit=True)``): what FULL does, once for all of them, in a
thread beside the loop, so other jobs go on while the disk syncs; those awaiting the commit go
on once it is synced.

Several afc processes on one host share a SQLite ledger (transactions are serialised by its
write lock); processes on several hosts need the PostgreSQL backend (postgres.py).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from afc_cli import ledger_file
from afc_cli.errors import LedgerError, ledger_write_error
from afc_cli.ledger.core import (
    Ledger,
    admitted_history,
    admitted_needs,
    admitted_storage,
    moved_to,
    priced_answers_of,
)
from afc_cli.owner import current_owner

ADMIT_CACHE_KIB = -128 * 1024  # the page cache during an admission (negative: KiB)

BUSY_TIMEOUT_S = 30.0
# Under group commit, changes wait at most this long for their commit (and other afc
# processes at most this long for the write lock). Nothing that money depends on waits:
# attempt rows and failed attempts' outcomes commit at once; a success commits with its spool
# checkpoint (a crash before that commit adopts the spool file: nothing is paid twice).
GROUP_COMMIT_S = 0.005


_TRANSACTION_CONTROL = ("BEGIN", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE")


class Connection:
    """What the ledger's operations use of sqlite-utils' ``Database`` (``execute``, ``conn``,
    ``close``), with its meaning, without importing sqlite-utils (about 0.15 s of every
    command's start-up; it is imported only to apply migrations). As sqlite-utils 4 does: a
    statement that opens an implicit transaction outside any transaction (a lone ``UPDATE``)
    is committed at once, and one that fails is rolled back; ``recursive_triggers`` is on."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        conn.execute("PRAGMA recursive_triggers=on;")

    def execute(self, sql: str, parameters: Any = None) -> sqlite3.Cursor:
        conn = self.conn
        was_in_transaction = conn.in_transaction
        try:
            cursor = conn.execute(sql) if parameters is None else conn.execute(sql, parameters)
        except Exception:
            if not was_in_transaction and conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        if (
            not was_in_transaction
            and conn.in_transaction
            and cursor.description is None
            and _first_keyword(sql) not in _TRANSACTION_CONTROL
        ):
            conn.execute("COMMIT")
        return cursor

    def close(self) -> None:
        self.conn.close()


def _first_keyword(sql: str) -> str:
    """The statement's first word, upper-cased, past blanks, ``;`` and SQL comments."""
    text = sql
    while True:
        text = text.lstrip(" \t\r\n\f\v;\ufeff")
        if text.startswith("--"):
            text = text.partition("\n")[2]
        elif text.startswith("/*"):
            text = text.partition("*/")[2]
        else:
            break
    end = 0
    while end < len(text) and (text[end].isalpha() or text[end] == "_"):
        end += 1
    return text[:end].upper()


def _failure(done: Any) -> BaseException | None:
    """Why a finished sync (an asyncio future) failed, or None."""
    if done.cancelled():
        return RuntimeError("the WAL sync was cancelled")
    return done.exception()


def _temporary_data(conn: sqlite3.Connection) -> sqlite3.Connection:
    """SQLite spills a big sort (a GROUP BY over a ledger's 50,000 attempts: ``afc costs report
    --by model``, ``afc report --html``) to a temporary file in the first writable folder of
    SQLITE_TMPDIR, TMPDIR, /var/tmp, /usr/tmp, /tmp and the working directory (its unix VFS's
    list). A container with a read-only root and the ledger on its one volume has none: the
    sort failed as 'disk I/O error', which afc said as a disk to fix and a command to run
    again. With no such folder, that data is kept in memory (a few MB) instead."""
    if ledger_file.sqlite_temp_folder() is None:
        conn.execute("PRAGMA temp_store = MEMORY")
    return conn


def _read_only(path: Path) -> sqlite3.Connection:
    """``path`` opened read-only. A WAL ledger's reader needs SQLite's shared-memory file
    beside it, which it cannot make in a folder it cannot write (a read-only mount, a folder
    of the user that runs the renders): 'afc plan', which writes nothing, was refused there
    as 'cannot open the ledger ... check the path and folder'. With no ``-wal`` file beside
    it, no run is writing it (a run would have made one) and the file is the whole ledger:
    it is read as immutable."""
    ledger_file.refuse_special(path)  # a FIFO's open waits for ever
    uri = path.resolve().as_uri()
    conn = sqlite3.connect(f"{uri}?mode=ro", uri=True)
    try:
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        return _temporary_data(conn)
    except sqlite3.OperationalError as exc:
        conn.close()
        wal = path.with_name(path.name + "-wal")
        if "unable to open" not in str(exc) or wal.exists() or os.access(path.parent, os.W_OK):
            raise
    return _temporary_data(sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True))


class SqliteLedger(Ledger):
    def __init__(
        self, path: str | Path, *, create: bool = True, check: bool = False, reading: bool = False
    ):
        self.path = ledger_file.ledger_path(path)
        if not create and not self.path.exists():
            raise LedgerError(f"no ledger at {self.path} (run 'afc submit MANIFEST' first)")
        if create:
            ledger_file.prepare_folder(self.path)
        if reading and not create and not ledger_file.writable(self.path):
            self._open_to_read()
            return
        ledger_file.check_writable(self.path)
        try:
            conn = _temporary_data(sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_S))
        except sqlite3.DatabaseError as exc:
            raise ledger_file.damaged(self.path, exc) from None
        with self._closed_on_error(conn):
            # whose file this is, before anything (even WAL mode) is written to it
            found = ledger_file.identity(conn, self.path)
            if found == "new" and not create:  # an empty file: a reading command writes none
                raise self._empty()
            if found == "afc" and check:
                ledger_file.check_pages(conn, self.path)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            self._start(conn)
            if found == "new" or not ledger_file.stamped(conn) or ledger_file.pending(conn):
                # Under the write lock, so two runs opening a new ledger at once (overlapping
                # cron jobs) apply each migration once; the loser finds nothing pending.
                from sqlite_utils import Database

                from afc_cli.migrations import migrations

                with self.tx():
                    ledger_file.identity(conn, self.path)  # again, now under the lock
                    self._check_no_live_runs(conn)
                    before = ledger_file.applied_names(conn)
                    migrations.apply(Database(conn, execute_plugins=False))
                    ledger_file.stamp(conn)
                pending = [n for n in ledger_file.known_migrations() if n not in before]
                ledger_file.say_migrated(self.path, len(before), pending)

    @contextmanager
    def _closed_on_error(self, conn: sqlite3.Connection) -> Iterator[None]:
        """An open's checks of ``conn``: a refusal closes it, a SQLite error on the way is
        the ledger's damage said in one line (``ledger_file.damaged``)."""
        try:
            yield
        except LedgerError:
            conn.close()
            raise
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise ledger_file.damaged(self.path, exc) from None

    def _empty(self) -> LedgerError:
        return LedgerError(
            f"no ledger at {self.path} (the file is empty; run 'afc submit MANIFEST' first)"
        )

    def _open_to_read(self) -> None:
        """``reading``: a command that only reads (``afc status``, ``outputs``, ``show``,
        ``queue stats``, ``costs report``, ``report --html``, ``webhooks list``, ``review
        list``) on a ledger this user may read
        but not write (a monitoring user's, another user's with umask 022, a copy on a
        read-only mount) opens it read-only, where it was refused as read-only like a run.
        Nothing is migrated or written; a ledger an older afc wrote, whose schema this afc
        would bring up to date first, is refused (exit 2) as before, saying so."""
        ledger_file.refuse_special(self.path)
        if self.path.is_dir():
            raise LedgerError(f"the ledger {self.path} is a folder; name a file")
        try:
            conn = _read_only(self.path)
        except sqlite3.DatabaseError as exc:
            raise ledger_file.damaged(self.path, exc) from None
        with self._closed_on_error(conn):
            if ledger_file.identity(conn, self.path) == "new":
                raise self._empty()
            if not ledger_file.stamped(conn) or ledger_file.pending(conn):
                raise LedgerError(
                    f"the ledger {self.path} is read-only here, and an older afc wrote it: "
                    "this afc brings its schema up to date before reading it, which needs "
                    "it writable; make it writable (or run any afc command where it is) and "
                    "read it again"
                )
        self._start(conn)

    def _start(self, conn: sqlite3.Connection) -> None:
        self.db = Connection(conn)
        self.owner = current_owner()
        self._depth = 0
        self._loop: Any = None
        self._flush_scheduled = False
        self._waiters: list[Any] = []  # futures of ``committed`` callers
        self._broken = False
        self._broken_by: BaseException | None = None  # why: for the run's message
        self._sync_pending = False  # the shared transaction holds a row to sync at commit
        self._syncing: Any = None  # the WAL sync running beside the loop, if any

    def _check_no_live_runs(self, conn: sqlite3.Connection) -> None:
        """Under the migration's write lock: refuse to migrate under a live (older) run
        (``ledger_file.check_no_live_runs``)."""
        tables = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        if ("_sqlite_migrations",) not in tables or ("jobs",) not in tables:
            return
        done = ledger_file.applied_names(conn)
        pending = [name for name in ledger_file.known_migrations() if name not in done]
        if not pending:
            return
        rows = conn.execute(ledger_file.leases_sql(done)).fetchall()
        ledger_file.check_no_live_runs(self.path, rows, self.lease_clock(), pending)

    def newer_migrations(self, wait: bool = False) -> list[str]:
        if wait:
            # a migration holds the write lock until it commits (``__init__``)
            with self.tx():
                return self.newer_migrations()
        # a newer afc stamps its own count (ledger_file.stamp): one pragma while none has
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        known = ledger_file.known_migrations()
        if version <= len(known):
            return []
        applied = self.db.execute(
            "SELECT name FROM _sqlite_migrations WHERE migration_set = ? ORDER BY rowid",
            (ledger_file.MIGRATION_SET,),
        ).fetchall()
        return [row[0] for row in applied if row[0] not in known] or [f"version {version}"]

    def day_sql(self, column: str) -> str:
        # the whole second the moment is in (a CAST drops the fraction of these positive
        # times; floor() needs an SQLite built with its math functions): date() rounds to
        # the millisecond, which put an attempt started in a day's last half millisecond on
        # the next day (PostgreSQL's to_timestamp rounds to the microsecond: the engines
        # disagreed on it, and --since that next day left it out)
        return f"date(CAST({column} AS INTEGER), 'unixepoch')"

    @contextmanager
    def admission_cache(self) -> Iterator[None]:
        """The admission's pages stay in a bigger cache until its commit, instead of spilling
        to the WAL and being written again by the next chunks (100,000 jobs: a third less CPU;
        their pages take about 70 MiB); the old size is put back after."""
        cache = self.db.execute("PRAGMA cache_size").fetchone()[0]
        self.db.execute(f"PRAGMA cache_size = {ADMIT_CACHE_KIB}")
        try:
            yield
        finally:
            self.db.execute(f"PRAGMA cache_size = {int(cache)}")

    def columns(self, table: str) -> list[str]:
        return [row[1] for row in self.db.execute(f"PRAGMA table_info({table})")]

    def spool_root(self) -> Path:
        return self.spool_root_of(self.path)

    @staticmethod
    def spool_root_of(url: Any) -> Path:
        """Spooled bytes live beside the ledger file (``afc.db-spool``; ``spool_beside``)."""
        from afc_cli.spool import spool_beside

        return spool_beside(ledger_file.ledger_path(url))

    def close(self) -> None:
        self.db.close()

    # --- transactions ---------------------------------------------------------------------

    @contextmanager
    def tx(
        self, *, durable: bool = False, commit: bool = False, sync_on_commit: bool = False
    ) -> Iterator[Connection]:
        """One atomic state change.

        Outside group commit, each outermost block is its own transaction, opened with
        ``BEGIN IMMEDIATE`` so concurrent afc processes queue on the busy timeout instead of
        failing a read-to-write upgrade. A nested block joins the block around it.

        Under group commit (``grouped``, used by the run loop), blocks share one transaction
        that is committed every few milliseconds (``GROUP_COMMIT_S``), so many jobs' changes
        share one commit. A block that must be on disk before afc acts on it (the attempt row
        before a provider call) asks ``commit=True``; ``durable=True`` also syncs it
        (``synchronous=FULL``), for rows that must survive a power cut. Blocks never span an
        ``await``. Every expected refusal (JobLost, BudgetExhausted) is raised before a block
        writes anything, so a refused block leaves the shared transaction as it was; a block
        that fails after writing (a bug, a full disk) rolls the shared transaction back and
        stops the run: the ledger is then exactly as of the last commit, which every run
        resumes from.

        Why not sqlite-utils' ``db.atomic()`` here (migrations do use it): it opens a deferred
        ``BEGIN``, and a savepoint per block, each named at random, which defeats SQLite's
        statement cache; measured, that cost a third of the run loop's throughput.

        ``sync_on_commit=True``: under group commit, the block joins the shared transaction and
        the commit that ends it also fsyncs the WAL file, which is what ``synchronous=FULL``
        does at a commit in WAL mode; the caller awaits ``committed()``. So a hundred paid
        attempts starting together cost one sync, not a hundred commits of their own, each
        synced (measured: 200 calls of 1 s at 100 wide took 6.0 s with those, 4.3 s without
        them). Outside group commit it is ``durable=True``.
        """
        if sync_on_commit and self._loop is None:
            durable = True
        conn = self.db.conn
        if self._broken:
            raise ledger_write_error(
                self.path, self._broken_by or "a write failed earlier in this run"
            )
        if self._depth:
            self._depth += 1
            try:
                yield self.db
            finally:
                self._depth -= 1
            return
        if durable and conn.in_transaction:
            self.flush()  # FULL can only be set between transactions
        own = not conn.in_transaction
        if own:
            if durable:
                conn.execute("PRAGMA synchronous=FULL")
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if self._loop is not None:
                    # Another process kept the write lock past the busy timeout (a sqlite3
                    # shell in a transaction): the run stops. Each job with a render slot
                    # would otherwise wait its own busy timeout in turn in the loop's thread
                    # (32 slots: 16 minutes) before the run could end. Raised as the ledger
                    # write error it is (as a later write's and PostgreSQL's are), not as
                    # SQLite's own: that one, met by a job whose paid call had just returned,
                    # was taken for a bug in afc, which cancelled the calls in flight and
                    # left the renders in memory unkept, to be paid for again
                    self._broken = True
                    self._broken_by = exc
                    raise ledger_write_error(self.path, exc) from None
                raise
        changes = conn.total_changes
        self._depth = 1
        try:
            yield self.db
        except BaseException:
            self._depth = 0
            if conn.in_transaction and (own or conn.total_changes != changes):
                conn.execute("ROLLBACK")
                if not own:
                    self._broken = True  # other blocks' changes went with it: stop the run
                    self._broken_by = sys.exc_info()[1]
            if durable and own:
                conn.execute("PRAGMA synchronous=NORMAL")
            raise
        self._depth = 0
        if sync_on_commit and not durable:
            self._sync_pending = True
        if self._loop is None or commit or durable:
            self.flush()
            if durable and own:
                conn.execute("PRAGMA synchronous=NORMAL")
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_later(GROUP_COMMIT_S, self._scheduled_flush)

    def _scheduled_flush(self) -> None:
        """A group commit from the event loop. If it fails (a full disk), the jobs waiting on
        it were told (``flush``); the shared transaction is rolled back to the last commit, and
        the next block stops the run (exit 1, every job resumable; a spool file whose
        checkpoint was lost is adopted by the next run)."""
        try:
            self.flush()
        except Exception as exc:  # noqa: BLE001 - reported to the run through _broken
            self._broken = True
            self._broken_by = exc
            with contextlib.suppress(sqlite3.Error):
                if self.db.conn.in_transaction:
                    self.db.conn.execute("ROLLBACK")

    def flush(self) -> None:
        """Commit the shared transaction, if one is open and no block is running. A commit
        that must also be synced and that callers await (``committed``) is synced beside the
        loop (``_sync_beside``); any other is synced here before this returns."""
        self._flush_scheduled = False
        waiters, self._waiters = self._waiters, []
        try:
            if self._depth == 0 and self.db.conn.in_transaction:
                self.db.conn.execute("COMMIT")
                if self._sync_pending:
                    self._sync_pending = False
                    if waiters and self._loop is not None:
                        self._sync_beside(waiters)
                        return
                    self._sync_wal()
        except BaseException as exc:
            self._settle(waiters, exc)
            raise
        self._settle(waiters)

    def _sync_beside(self, waiters: list[Any]) -> None:
        """Sync the WAL file in a thread while the loop goes on, and tell ``waiters`` once it
        is on disk. The commit's frames were written before the thread starts, so its fsync
        covers them; nobody waiting goes on (no provider call starts) before it returned.

        Why: a group commit's fsync took ~5-10 ms here, and in the loop's thread it stalled
        every job for that long, once per commit: at 500 calls in flight that was a tenth of
        a second of stall per second of run. A failed sync stops the run, as a failed commit
        does (``_scheduled_flush``)."""
        syncing = self._loop.run_in_executor(None, self._sync_wal)
        self._syncing = syncing

        def synced(done: Any) -> None:
            if self._syncing is done:
                self._syncing = None
            error = _failure(done)
            if error is not None:
                self._broken = True
                self._broken_by = error
            self._settle(waiters, error)

        syncing.add_done_callback(synced)

    def after_sync(self, callback: Any) -> None:
        """Call ``callback`` once the WAL sync running beside the loop (if any) is done and
        the jobs awaiting it have gone on, else at once. A run's signal handling goes through
        this (afc_cli/run.py ``Interruption``): a job whose attempt row another process can
        already see goes on to its call before a stop is acted on, as when the sync ran in
        the loop's own thread (measured: without this, a SIGTERM right after 12 rows were
        visible left some of them 'never sent', tests/test_interruptions.py)."""
        loop, syncing = self._loop, self._syncing
        if loop is None:
            callback()
        elif syncing is None:
            # a sync that just ended may have woken its waiters without their having run yet:
            # the callback goes behind their wake-ups
            loop.call_soon(callback)
        else:
            # the sync's own callback (registered first) wakes its waiters; this one queues
            # the callback behind their wake-ups
            syncing.add_done_callback(lambda _done: loop.call_soon(callback))

    def _sync_wal(self) -> None:
        """Put the WAL file's committed frames on disk (``synchronous=FULL``'s commit sync)."""
        fd = os.open(f"{self.path}-wal", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    async def committed(self) -> None:
        """Return once everything written so far is committed (not synced: see ``tx``).

        Under group commit, callers that ask in the same turn of the event loop share one
        commit, at the next turn: the attempt rows of jobs starting together are committed
        before any of their provider calls, with one commit instead of one each."""
        if self._loop is None:
            return
        if not self.db.conn.in_transaction:
            syncing = self._syncing  # the last commit may still be syncing beside the loop
            if syncing is not None:
                waiter = self._loop.create_future()
                syncing.add_done_callback(lambda done: self._settle([waiter], _failure(done)))
                await waiter
            return
        await self._join_commit()

    @contextmanager
    def grouped(self, loop: Any) -> Iterator[None]:
        """Group commit for the duration of a run on ``loop``; everything is committed after."""
        self._loop = loop
        try:
            yield
        finally:
            self._loop = None
            self.flush()

    @staticmethod
    def read_admitted(
        ledger_path: str, batch: str, models: Collection[tuple[str, str]] = ()
    ) -> tuple[str | None, str | None, dict, dict, str | None, dict, list, tuple]:
        """``core.read_admitted`` on SQLite, read without writing anything: the file is opened
        read-only (no migrations, no lock); no ledger, or a file afc has not written yet,
        means nothing is admitted."""
        path = ledger_file.ledger_path(ledger_path)
        if not path.exists():
            return None, None, {}, {}, None, {}, [], (None, None)
        try:
            conn = _read_only(path)
        except sqlite3.DatabaseError as exc:
            raise ledger_file.damaged(path, exc) from None
        try:
            try:
                if ledger_file.identity(conn, path) == "new":
                    return None, None, {}, {}, None, {}, [], (None, None)
            except sqlite3.DatabaseError as exc:
                raise ledger_file.damaged(path, exc) from None
            storage, endpoint, marked = admitted_storage(conn, batch, "?")
            # a ledger before m007 (read-only: not migrated) has no review and no needs
            gated = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'job_needs'"
            ).fetchone()
            # a ledger before m009 (read-only: not migrated) has no lease on a host's
            # monotonic clock
            mono = conn.execute(
                "SELECT 1 FROM pragma_table_info('jobs') WHERE name = 'lease_mono'"
            ).fetchone()
            jobs = {
                key: rest
                for key, *rest in conn.execute(
                    "SELECT key, request_hash, status, request_json, "
                    + ("review" if gated else "0")
                    + ", attempts, lease_owner, lease_expires, waiting_reason, output_key, "
                    # where its input files were read (m007, as the review): a conflict says
                    # those changed on disk since (``conflicts.inputs_changed``)
                    + ("inputs_json" if gated else "NULL")
                    # the lease's expiry on its host's monotonic clock (``owner.lease_held``)
                    + (", lease_mono" if mono else ", NULL")
                    + " FROM jobs WHERE batch = ?",
                    (batch,),
                )
            }
            needs = admitted_needs(conn, batch, "?") if gated else {}
            # a ledger before m010 (read-only: not migrated) was never moved
            moves = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ledger_moves'"
            ).fetchone()
            moved = moved_to(conn) if moves else None
            # a ledger before m006 (read-only: not migrated) has no retries to count from
            based = conn.execute(
                "SELECT 1 FROM pragma_table_info('jobs') WHERE name = 'attempt_base'"
            ).fetchone()
            history = admitted_history(conn, batch, "?") if based else {}
            answers = priced_answers_of(conn, batch, models, "?", SqliteLedger.BATCH_ATTEMPTS)
            return storage, endpoint, jobs, needs, moved, history, answers, marked
        except sqlite3.DatabaseError as exc:
            if "malformed" in str(exc):
                # a damaged page: the plan said every job was new (and priced its render)
                # while the submit it plans is refused, exit 2; so is the plan now
                raise ledger_file.damaged(path, exc) from None
            return None, None, {}, {}, None, {}, [], (None, None)
        finally:
            conn.close()
