"""The PostgreSQL backend of the ledger: one database shared by afc workers on many hosts.

``--ledger postgresql://user@host/db`` (or ``AFC_LEDGER``) selects it; psycopg 3 comes with the
``postgres`` extra (``pip install 'afc-cli[postgres]'``) and is imported only here.

- **SQL.** The operations (core.py) are written once with ``?`` placeholders, as SQLite takes
  them; this backend turns each ``?`` outside a quoted string into psycopg's ``%s`` (and a
  literal ``%`` into ``%%``), once per distinct statement.
- **Transactions.** Outside a run loop, every outermost ``tx`` block is its own transaction,
  committed when the block ends (READ COMMITTED; every write that decides something is a
  conditional ``UPDATE`` or an ``INSERT ... ON CONFLICT``, which PostgreSQL re-checks on the row
  it locked). In a run loop (``grouped``), as on SQLite, the blocks of many jobs share one
  transaction committed every few milliseconds (``GROUP_COMMIT_S``) or when a job awaits
  ``committed()`` (its attempt row, before the provider call): one ``BEGIN``/``COMMIT`` for
  many jobs' changes instead of one per change. The rows such a transaction locks are the
  run's own leased jobs, which no other run writes. A block that may have to wait for a row
  another run holds waits alone: a claim takes a free job with ``SKIP LOCKED`` (a row another
  process is writing is never waited for there) and otherwise, like the settling of a blocked
  job and the taking of the shared budget's and provider limits' advisory locks, commits the
  group first and commits itself at its end (``_alone``). So no wait happens while holding
  another job's row: two runs claiming the same jobs in different orders never deadlock. A
  takeover (and a person's cancel) marks the job's ``started`` attempts ``unknown`` after
  locking its row; a holder stalled past its lease may be writing one of them, its job's row
  next, in one transaction: those attempts are locked first, ``SKIP LOCKED``
  (``_attempts_free``), and one found locked leaves the job to that live holder. A
  worker's claim of free jobs (``claim_runnable``) is a transaction of its own too, though it
  waits for nothing: ``SKIP LOCKED`` still locks a row another worker claimed and committed
  while the statement ran (free in its snapshot, taken when re-checked) and keeps it locked,
  skipped, until the transaction ends; in a group transaction that lock would make the row's
  owner wait milliseconds to write its own job, and two groups each holding such a lock on a
  job of the other deadlocked (``deadlock detected`` while updating ``jobs``). A
  failed statement aborts a PostgreSQL transaction: it rolls back every change since the
  last commit and stops the run, which the next run resumes from (``tx``).
  No transaction is held open across an ``await``, a provider call or an upload.
- **Durability**, as on SQLite (sqlite.py): a block that asks ``durable`` or ``sync_on_commit``
  (the attempt row committed before a paid provider call, a submitted request's id) commits
  with the server's ``synchronous_commit`` (``on`` by default): on disk when the commit returns.
  Every other commit is asynchronous (``synchronous_commit = off`` for the session): it never
  waits for the server's WAL flush, and a *server* crash may lose the last fraction of a second
  of them, never corrupting anything, which is exactly what SQLite's ``synchronous=NORMAL``
  risks on a power cut. What such a loss costs is nothing paid twice: a lost success is found
  stored by the next run's probe, a lost spool checkpoint is adopted from the spool file. A
  worker's own crash loses nothing committed.
- **Migrations.** The same numbered list as SQLite (afc_cli/migrations.py), each applied once in
  its own transaction under an advisory lock, so workers starting together apply each once;
  their SQLite DDL is translated (``INTEGER`` to ``BIGINT``, ``REAL`` to ``DOUBLE PRECISION``,
  an ``INTEGER PRIMARY KEY`` to an identity column, no ``WITHOUT ROWID``, ``COLLATE BINARY``
  to ``COLLATE "C"``). A database whose
  applied migrations include one this afc does not know (a newer afc's) is refused.
- **Time.** Lease expiries come from the database's clock (``lease_clock``: sampled every
  ``CLOCK_SAMPLE_S`` seconds, advanced between samples by the host's boot-time clock: monotonic,
  and counting a suspend, as the server's clock goes on meanwhile), so hosts whose clocks
  disagree still agree on when a lease expired, and when a delivery is due. Attempts' start
  and end times are on the server's clock too, without a round trip each: this host's clock
  plus its offset to the server's (``clock_offset``), measured at each sample.
- **Spool.** A PostgreSQL ledger is not a file, so a run's spool is the folder ``AFC_SPOOL_DIR``
  names, else ``afc-spool`` in the working directory: spooled bytes stay on the host that
  rendered them (README: "Running on several machines"). Two ledgers run from one folder
  would share it, so a run marks it as its ledger's (``spool_identity``, ``run.own_spool``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
import zlib
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

from afc_cli import streams
from afc_cli.errors import (
    FrozenSession,
    LedgerError,
    LedgerUnreachable,
    LedgerWriteError,
    UsageError,
    _lock_wait,
    first_line,
    ledger_write_error,
)
from afc_cli.ledger import core
from afc_cli.ledger.core import (
    Ledger,
    admitted_history,
    admitted_needs,
    admitted_storage,
    moved_to,
    priced_answers_of,
)
from afc_cli.owner import awake_clock, current_owner

# psycopg logs what it could not do while already failing (closing the pipeline of a lost
# connection: "error ignored terminating <psycopg.Pipeline [BAD] ...>"), and with no logging
# configured Python printed it on stderr before afc's own one-line message of that failure
# (a submit's admission, 'afc ledger copy', cut off mid-insert). afc says every failure of
# its ledger itself: the driver's log goes nowhere.
logging.getLogger("psycopg").addHandler(logging.NullHandler())

MIGRATIONS_TABLE = "afc_migrations"
# what tells this ledger's spool from another's (``PostgresLedger.spool_identity``)
SPOOL_IDENTITY_SQL = (
    "SELECT d.oid, (SELECT m.applied_at FROM"
    f" {MIGRATIONS_TABLE} m WHERE m.migration_set = 'afc' AND m.name = 'm001_initial')"
    " FROM pg_database d WHERE d.datname = current_database()"
)
# pg_advisory_xact_lock keys: one for migrations, one per shared limit (afc + a purpose)
MIGRATION_LOCK = zlib.crc32(b"afc:migrations")
BUDGET_LOCK = zlib.crc32(b"afc:budget") & 0x7FFFFFFF  # the two-int form takes int4 keys
LIMIT_LOCK = zlib.crc32(b"afc:limit") & 0x7FFFFFFF
OUTPUT_LOCK = zlib.crc32(b"afc:output") & 0x7FFFFFFF
WALK_LOCK = zlib.crc32(b"afc:walk") & 0x7FFFFFFF  # a decision's walk over the jobs behind it
CONNECT_TIMEOUT_S = 10
# A database host that vanishes (powered off, a network cut) sends no reset: without these a
# worker waiting on its connection (a claim, a commit) waits as long as the kernel's default
# keepalive does, over two hours, holding its calls' renders unrecorded. With them the lost
# connection is found within about a minute and the worker stops as when the server ends its
# session (README, "Running on several machines"). A URL that sets one of them keeps its own.
KEEPALIVE_DEFAULTS = {
    "keepalives": "1",
    "keepalives_idle": "30",  # seconds of silence before the first probe
    "keepalives_interval": "10",  # seconds between probes
    "keepalives_count": "3",  # probes unanswered before the connection is called lost
    "tcp_user_timeout": "60000",  # ms a sent packet may stay unacknowledged (Linux)
}
# Under group commit, changes wait at most this long for their commit. Nothing that money
# depends on waits: the attempt row before a paid call is committed (synced) before the call
# by ``committed()``; a success commits with its spool checkpoint (sqlite.py says why a crash
# before that commit costs nothing paid twice).
GROUP_COMMIT_S = 0.005
# How long a claim tries for a job row another transaction has locked (a moment's write of
# its holder, another claim) before it takes the job to be held (``_claimable``), and the
# pause between tries.
CLAIM_ROW_WAIT_S = 0.25
CLAIM_ROW_RETRY_S = 0.01
# how often the lease clock is sampled from the server (``lease_clock``)
CLOCK_SAMPLE_S = 10.0
# how far back a new sample may find the server's clock and ``lease_clock`` stays where it
# was (the sample's error, not a step of the server's clock)
CLOCK_HELD_S = 1.0
# How long ``afc ledger copy`` waits for the source's jobs table (``lock_jobs``): the runs'
# transactions last milliseconds, and while the copy's request waits, every other claim and
# write of a job queues behind it
COPY_LOCK_WAIT_S = 10.0
# How long a statement waits for a lock another session holds (``lock_timeout``) before it
# fails with the ledger's error, as SQLite's busy timeout (sqlite.BUSY_TIMEOUT_S) bounds a
# wait for its write lock: a psql session left in a transaction that wrote a job (or
# ``SELECT ... FOR UPDATE``, ``LOCK TABLE jobs``) held 'afc cancel', 'afc retry' and a
# review decision for as long, without a word. A lock_timeout the server, the database,
# the role or PGOPTIONS set is kept.
LOCK_WAIT_S = 30.0
# How long one wait on the server's answer may last (a statement, a commit, a pipeline's
# sync: ``psycopg.Connection.wait``) before the connection is cut (``StallWatch``):
# a backend that stops answering (its server's disk hung, the process stopped) keeps its
# connection alive, so neither the keepalives nor ``tcp_user_timeout`` notice, and a run
# waited in its ledger write for ever, deaf to SIGTERM and a second SIGTERM (its signals are
# acted on by the run loop the write held); cron's SIGKILL then left its calls in flight
# unrecorded. Every wait afc makes in a run lasts milliseconds, or LOCK_WAIT_S at most;
# migrations are not watched (an index of a large ledger may take minutes). AFC_PG_STALL_S
# sets it; 0 turns the watch off.
STALL_S = 300.0
# In a run loop, which holds leases, a wait is cut sooner: once it lasts a third of the lease
# (``AFC_LEASE_S``), but never before this many seconds (``PostgresLedger.grouped``)
STALL_FLOOR_S = 5.0
# and a wait for a lock then ends at this share of that bound (``_bound_lock_waits``): the
# lock's own error, before the watch cuts the connection as a server that stopped answering
LOCK_SHARE = 0.8
# How long the probe of a connection pooler's mode (``refuse_shared_sessions``) waits for its
# second connection's answer: a pool in session mode whose every server is taken queues it
POOL_PROBE_S = 3.0


# a URL's password in its user part (``postgresql://user:PASSWORD@host``), the user kept;
# the user name may be empty (``postgresql://:PASSWORD@host``: libpq takes the user from
# PGUSER or the login), which a mask wanting one before the colon showed whole
USERINFO_PASSWORD = re.compile(r"(://[^:/@]*:)([^@]*)@")


def display_url(url: str) -> str:
    """The URL with its password masked: what messages and ``--json`` may show."""
    from afc_cli.secrets import REDACTED, scrub

    # the password and any key-like query parameter (?password=...) masked as every other
    # message masks a secret: ``scrub`` masks a URL's whole ``user:password@``, so the user
    # name shows only where no password follows it (postgresql://afc@db/afc)
    return scrub(USERINFO_PASSWORD.sub(r"\1" + REDACTED + "@", url))


# what a URL's user name and password must percent-encode before libpq can read them: an
# '@' ('%40'), a '/' ('%2F'), a space or another blank, a '%' not starting %XX
_USERINFO_UNREADABLE = re.compile(r"[@/\s]|%(?![0-9A-Fa-f]{2})")


def check_url(url: str) -> None:
    """Refuse (exit 2, before any connection) a URL whose user name or password holds a
    character it must percent-encode: libpq splits such a URL elsewhere than its writer
    meant and quotes the pieces in its error (``failed to resolve host 'et@db'``,
    ``unexpected spaces found in "cret word@db"``), where no mask can know them as a
    password's. The URL is not shown: it holds the password."""
    rest = url.split("://", 1)[-1].split("?", 1)[0]
    userinfo = rest[: rest.rfind("@")] if "@" in rest else ""
    if _USERINFO_UNREADABLE.search(userinfo):
        raise UsageError(
            "the PostgreSQL ledger URL's user name or password holds a character a URL must "
            "percent-encode: write '@' as %40, '/' as %2F, a space as %20 and '%' as %25 (the "
            "URL is not shown here: it holds the password)"
        )


# libpq's refusal of a connection option's value, before any connection is tried ('invalid
# integer value "x" for connection option "port"', 'invalid sslmode value: "x"', 'invalid port
# number: "x"'); psycopg says 'connection is bad: ' before it. A server's refusal reads
# 'connection failed: connection to server at ...'. So is a connection service libpq cannot
# find or read (``?service=afc`` with no such section in the service file, PGSERVICEFILE naming
# no file, a line it cannot parse): exit 1 said "run it again once it answers" to a cron line
# that no server coming back mends
_OPTION_REFUSED = re.compile(
    r"(?:connection is bad: )?(?:invalid \S+ (?:value|number)\b|definition of service "
    r'"[^"]*" not found|service file "[^"]*" not found|syntax error in service file\b)'
)


def connect_error(url: str, exc: BaseException) -> LedgerError:
    """``cannot connect to the ledger``, in one line, without the URL's password: libpq
    quotes a password it cannot read in its message (``unexpected spaces found in "..."``,
    ``invalid percent-encoded token: "..."``), and ``scrub`` cannot know that value."""
    from urllib.parse import unquote

    from afc_cli.secrets import REDACTED

    why = first_line(exc)
    passwords = [m.group(2) for m in USERINFO_PASSWORD.finditer(url)]
    passwords += re.findall(r"[?&](?:ssl)?password=([^&]*)", url)
    for password in passwords:
        for form in sorted({password, unquote(password)}, key=len, reverse=True):
            if form:
                why = why.replace(form, REDACTED)
    said = f"cannot connect to the ledger {display_url(url)}: {why}"
    if isinstance(exc, _psycopg().ProgrammingError) or _OPTION_REFUSED.match(why):
        # libpq could not read the URL (``invalid percent-encoded token``), or refused one of
        # its values before connecting (a port not a number, an sslmode misspelt): a usage
        # error, which no server coming back mends, not an outage for a cron to retry
        return LedgerError(said)
    return LedgerUnreachable(said)  # no server answered, or one refused: exit 1


@lru_cache(maxsize=512)
def translate(sql: str) -> str:
    """SQLite-style ``?`` placeholders to psycopg's ``%s``; a literal ``%`` doubles."""
    out = []
    quote = None
    for char in sql:
        if quote:
            if char == quote:
                quote = None
            out.append("%%" if char == "%" else char)
        elif char in ("'", '"'):
            quote = char
            out.append(char)
        elif char == "?":
            out.append("%s")
        elif char == "%":
            out.append("%%")
        else:
            out.append(char)
    return "".join(out)


_DDL = [
    (
        re.compile(r"\bINTEGER PRIMARY KEY\b", re.I),
        "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
    ),
    (re.compile(r"\bINTEGER\b", re.I), "BIGINT"),
    (re.compile(r"\bREAL\b", re.I), "DOUBLE PRECISION"),
    (re.compile(r"\)\s*WITHOUT ROWID", re.I), ")"),
    # SQLite's code point order is PostgreSQL's "C" collation (``CODE_POINT``)
    (re.compile(r"\bCOLLATE BINARY\b", re.I), 'COLLATE "C"'),
]


def translate_ddl(statement: str) -> str:
    """A migration's SQLite DDL in PostgreSQL's types (see the module docstring)."""
    for pattern, replacement in _DDL:
        statement = pattern.sub(replacement, statement)
    return statement


@lru_cache(maxsize=512)
def _unread(sql: str) -> bool:
    """An ``INSERT`` without ``RETURNING``: nothing of its result is read (an append to the
    events, steps or attempts; every one ``ON CONFLICT``-safe), so in a pipeline it is sent
    without waiting for its answer."""
    head = sql.lstrip()[:6].upper()
    return head == "INSERT" and "RETURNING" not in sql.upper()


class PgDatabase:
    """What the operations use of sqlite-utils' ``Database``: ``execute`` (a DB-API cursor),
    ``conn.executemany`` and, for migrations, ``executescript``.

    In a group transaction (``PostgresLedger.tx`` under ``grouped``) the connection is in
    psycopg's pipeline mode: statements whose result nobody reads (``_unread``) are sent
    without waiting for the server, and the next statement whose result is read (a
    conditional ``UPDATE``'s row count, a ``SELECT``) or the ``COMMIT`` waits for all of
    them at once. An error in one surfaces there: as any failed statement in a group, it
    takes the group back and stops the run."""

    dialect = "postgresql"  # a migration's own statements for PostgreSQL (m019's triggers)

    def __init__(self, conn: Any):
        self.raw = conn
        self.migrating = False  # statements without parameters are DDL to translate
        self.writes = 0  # statements that changed rows: tells a block that wrote (Ledger.tx)
        self.pipe: Any = None  # psycopg's Pipeline while one is open
        self._pipe_cm: Any = None
        self.on_failure: Any = None  # called with an error a pipeline sync raised

    @property
    def conn(self) -> PgDatabase:
        return self

    def open_pipeline(self) -> None:
        self._pipe_cm = self.raw.pipeline()
        self.pipe = self._pipe_cm.__enter__()

    def close_pipeline(self, exc: BaseException | None = None) -> None:
        """Leave pipeline mode: everything sent is answered (its first error is raised)."""
        cm, self._pipe_cm, self.pipe = self._pipe_cm, None, None
        if cm is not None:
            cm.__exit__(type(exc) if exc else None, exc, None)

    def execute(self, sql: str, params: Any = (), *, wait: bool = True) -> Any:
        """``wait=False``: in a pipeline, send the statement and return its cursor without
        waiting for the answer; it arrives with the next statement that waits, and is read
        from the cursor then (two reads for one round trip)."""
        try:
            # (inside: on a connection psycopg holds closed since it was lost, making the
            # cursor is what fails, "the connection is closed")
            cursor = self.raw.cursor()
            if params:
                cursor.execute(translate(sql), list(params))
            else:  # no parameters: psycopg sends the text as it is
                cursor.execute(translate_ddl(sql) if self.migrating else sql)
            if self.pipe is not None:
                if not wait:
                    return cursor
                if _unread(sql):
                    self.writes += 1  # its row count is not known yet: counted as a write
                    return cursor
                self.pipe.sync()  # this statement's answer, and those of all sent before it
        except Exception as exc:
            # In a pipeline, an earlier statement's error surfaces at the next send (psycopg
            # reads the answers that arrived) or at the sync: either way the group failed. A
            # lost connection (a server restarted, a backend terminated) fails a read outside
            # any block too: the ledger's error, not psycopg's
            # (tests/test_postgres_connection_lost.py), as is a read the role may not make
            # (``_refused``)
            lost = _refused(exc)
            if (self.pipe is not None or lost) and self.on_failure is not None:
                self.on_failure(exc)  # raises the ledger's error if outside any block
            raise
        if cursor.rowcount > 0 and sql.lstrip()[:4].upper() not in ("SELE", "SHOW", "SET "):
            self.writes += 1
        return cursor

    def executemany(self, sql: str, rows: Any) -> Any:
        rows = [list(row) for row in rows]
        try:
            cursor = self.raw.cursor()
            if rows:
                cursor.executemany(translate(sql), rows)
                self.writes += 1
        except Exception as exc:
            # a lost connection is the ledger's error, as in ``execute``
            if _refused(exc) and self.on_failure is not None:
                self.on_failure(exc)
            raise
        return cursor

    def executescript(self, script: str) -> None:
        for statement in script.split(";"):
            if statement.strip():
                self.raw.execute(translate_ddl(statement))


def _refused(exc: BaseException) -> bool:
    """A statement's failure that is the ledger's, not afc's: the connection lost (or a lock
    waited for past its bound, a statement the server cancelled), or a table the role afc
    connects as may not read. Operators grant a worker's role the tables that exist (``GRANT
    ... ON ALL TABLES IN SCHEMA``), which leaves out a table a later migration makes, and a
    read of it outside any block ('afc status', a worker's claim round) stopped with
    "unexpected error: InsufficientPrivilege ... (a bug in afc)"; a write's was the ledger's
    error already (``PostgresLedger.tx``)."""
    psycopg = _psycopg()
    return isinstance(exc, psycopg.OperationalError | psycopg.errors.InsufficientPrivilege)


def stall_seconds() -> float:
    """``STALL_S``, or ``AFC_PG_STALL_S`` (seconds, 0 for no limit)."""
    import os

    value = os.environ.get("AFC_PG_STALL_S", "").strip()
    if not value:
        return STALL_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise UsageError(f"AFC_PG_STALL_S must be a number of seconds (0: no limit), not {value!r}")
    return seconds


class StallWatch:
    """Cuts a connection whose wait on the server lasted past ``limit_s`` (``STALL_S``): a
    thread of its own looks at the wait under way once a second, and shuts the connection's
    socket down, which ends the wait (libpq reads the end of the stream) with an
    ``OperationalError``, the ledger's lost connection, as when the server ends a session:
    the run stops (exit 1), its calls in flight recorded as far as the ledger allows, every
    job resumable. The thread keeps no reference to the connection: only the socket's file
    descriptor while a wait is under way."""

    def __init__(self, limit_s: float) -> None:
        import threading

        self.limit_s = limit_s
        self.because = "AFC_PG_STALL_S"  # what set the limit, for ``said``
        self.paused = False  # a migration's statements (``PostgresLedger._migrate``)
        self.fired = False
        self._lock = threading.Lock()
        self._since: float | None = None
        self._fd: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="afc-pg-stall", daemon=True)
        self._thread.start()

    @contextmanager
    def waiting(self, fd: int) -> Iterator[None]:
        import time

        with self._lock:
            self._since, self._fd = (None, None) if self.paused else (time.monotonic(), fd)
        try:
            yield
        finally:
            with self._lock:
                self._since, self._fd = None, None

    def said(self) -> str:
        return (
            f"the PostgreSQL server did not answer for {self.limit_s:g} s ({self.because}): a "
            "backend that stopped (its server's disk hung, the process stopped); afc closed "
            "the connection"
        )

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        import time

        while not self._stop.wait(min(1.0, self.limit_s / 4)):
            with self._lock:
                since, fd = self._since, self._fd
                if since is None or fd is None or time.monotonic() - since <= self.limit_s:
                    continue
                self.fired = True
                self._since = None
                _shut(fd)  # under the lock: the wait has not ended, so the fd is still its own


def _shut(fd: int) -> None:
    import os
    import socket

    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.close()


def _connect(url: str, *, limit: float | None = None, probe: bool = True, **kwargs: Any) -> Any:
    """``psycopg.connect`` of the ledger ``url`` (``_connect_args``), each of its waits on
    the server watched (``StallWatch``, ``limit`` seconds, else AFC_PG_STALL_S's) unless that
    is 0: the connection's own ``wait`` (psycopg's one way to wait on the server: statements,
    commits, a pipeline's sync) and ``close`` are wrapped on it, so what ``psycopg.connect``
    makes is what afc uses. psycopg's own wait timeout exists only in its newest releases.
    A connection through a pooler that shares server sessions between clients is refused
    (``refuse_shared_sessions``; ``probe``: not the probe's own connection)."""
    psycopg = _psycopg()
    if limit is None:
        limit = stall_seconds()
    conn = psycopg.connect(**_connect_args(url), **kwargs)
    if limit:
        _watch(conn, limit, psycopg)
    if probe:
        try:
            refuse_shared_sessions(conn, url)
        except BaseException:
            conn.close()
            raise
    return conn


# What an earlier client left in a session (``refuse_shared_sessions``): afc's own settings,
# set for the session (pg_settings' source 'session'), or any prepared statement
LEFT_OVER_SQL = (
    "SELECT (SELECT count(*) FROM pg_prepared_statements) + (SELECT count(*) FROM pg_settings"
    " WHERE source = 'session' AND name IN ('synchronous_commit', 'jit', 'lock_timeout',"
    " 'idle_in_transaction_session_timeout',"
    " 'default_transaction_isolation'))"
)


def _backend_pid(conn: Any) -> int:
    """The pid of the server process that answers ``conn`` now (its transaction ended)."""
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    if not conn.autocommit:
        conn.rollback()
    return int(pid)


def refuse_shared_sessions(conn: Any, url: str) -> None:
    """Refuse (exit 2, before anything is set or written) a ledger reached through a pooler
    that hands one server session to many clients, a transaction at a time (PgBouncer's
    ``pool_mode = transaction`` or ``statement``). afc's session is its own: its settings
    (``synchronous_commit = off``, ``jit = off``, ``lock_timeout``) stayed in the server
    session for the pooler's next client, another application's commits made asynchronous,
    and the next afc read the server's ``synchronous_commit`` as ``off`` and committed the
    attempt row before a paid call without waiting for the disk; psycopg's prepared
    statements were met by the next client of that session ('afc worker', 'afc submit'
    stopped with "DuplicatePreparedStatement: prepared statement "_pg3_0" already exists
    (a bug in afc)"); a ``WITH HOLD`` cursor is gone at the next transaction. A pool in
    session mode gives each client a server session of its own: afc works through it, if
    the pool resets a session before its next client (PgBouncer's ``server_reset_query =
    DISCARD ALL``, the default); a session that comes with an earlier afc's settings or
    any prepared statements (``LEFT_OVER_SQL``) is refused as well.

    A pooler answers with a cancel key of its own, so ``conn``'s backend pid is not the
    server's (``pg_backend_pid()``); only then a second connection is opened: in session
    mode it is answered by another server process than ``conn`` for as long as both are
    open, and a pooler in transaction mode hands it the session ``conn`` just released
    (PgBouncer takes the last one released first). One the pooler keeps waiting (a pool in
    session mode with every server taken) past ``POOL_PROBE_S`` tells nothing: afc goes on."""
    psycopg = _psycopg()
    ours = _backend_pid(conn)
    if ours == conn.info.backend_pid:
        return  # the server's own session (or a proxy that passes its cancel key on)
    # A session handed on as the last client left it: an earlier afc's settings or prepared
    # statements still in it (a pool in session mode whose server_reset_query is empty, or
    # one in transaction mode). A pool that resets its sessions (PgBouncer's DISCARD ALL)
    # never hands on either.
    left = conn.execute(LEFT_OVER_SQL).fetchone()[0]
    if not conn.autocommit:
        conn.rollback()
    if left:
        raise LedgerError(
            f"the ledger {display_url(url)} is reached through a connection pooler that "
            "handed afc a server session another client left its settings or prepared "
            "statements in (PgBouncer with an empty server_reset_query, or pool_mode = "
            "transaction): afc's own would reach the next client and fail afc's next "
            "statements; give afc a pool in session mode that resets its sessions "
            "(server_reset_query = DISCARD ALL, the default) or the server itself (README, "
            "'Running on several machines'); nothing was written"
        )
    try:
        other = _connect(url, limit=POOL_PROBE_S, probe=False, autocommit=True)
    except psycopg.Error:
        return  # the pooler takes no other client now: nothing to tell
    try:
        seen = _backend_pid(other)
    except psycopg.Error:
        seen = None
    try:
        again = _backend_pid(conn)
    finally:
        with contextlib.suppress(psycopg.Error):
            other.close()
    if seen is not None and seen in (ours, again):
        raise LedgerError(
            f"the ledger {display_url(url)} is reached through a connection pooler that "
            "shares server sessions between its clients (PgBouncer's pool_mode = "
            "transaction or statement): afc keeps settings and prepared statements in its "
            "session, which would reach other clients' sessions and fail afc's own next "
            "statements; give afc a pool in session mode (pool_mode = session) or the "
            "server itself (README, 'Running on several machines'); nothing was written"
        )


def _watch(conn: Any, limit: float, psycopg: Any) -> None:
    """``_connect``'s ``StallWatch`` of ``conn``."""
    watch = StallWatch(limit)
    plain_wait, plain_close = conn.wait, conn.close

    def wait(gen: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            with watch.waiting(conn.pgconn.socket):
                return plain_wait(gen, *args, **kwargs)
        except psycopg.OperationalError as exc:
            if watch.fired:
                raise psycopg.OperationalError(watch.said()) from exc
            raise

    def close() -> None:
        watch.stop()
        plain_close()

    conn.wait, conn.close, conn.stall = wait, close, watch


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise UsageError(
            "a PostgreSQL ledger needs psycopg 3: pip install 'afc-cli[postgres]'"
        ) from None
    return psycopg


def _spool_identity(row: Any) -> str:
    """``PostgresLedger.spool_identity`` from ``SPOOL_IDENTITY_SQL``'s row: the database's oid
    and when afc's schema was applied (``run._restored`` reads the two parts)."""
    return f"postgresql:{row[0]}:{row[1]!r}"


def _refuse_newer(path: str, done: set[str]) -> None:
    """A ledger a newer afc migrated (``done``: the migrations applied to it) is refused."""
    from afc_cli.ledger_file import another_build, known_migrations

    known = known_migrations()
    unknown = sorted(done - set(known))
    if unknown and len(done) <= len(known):
        raise LedgerError(another_build(path, unknown, len(done), len(known)))
    if unknown:
        raise LedgerError(
            f"the ledger {path} has schema version {len(done)} (migrations this "
            f"afc does not know: {', '.join(unknown)}); this afc knows version "
            f"{len(known)}. Upgrade afc to use it."
        )


def _connect_args(url: str) -> dict[str, Any]:
    """``psycopg.connect``'s arguments for the ledger ``url``: the URL (``postgres://`` is
    ``postgresql://`` by another name), the connect timeout, the keepalive defaults
    (``KEEPALIVE_DEFAULTS``) and the session's name ('afc') the URL does not set itself."""
    from psycopg.conninfo import conninfo_to_dict

    dsn = re.sub(r"^postgres://", "postgresql://", url)
    given = conninfo_to_dict(dsn)
    args: dict[str, Any] = {"conninfo": dsn}
    if "connect_timeout" not in given:
        args["connect_timeout"] = CONNECT_TIMEOUT_S
    if "fallback_application_name" not in given:
        # pg_stat_activity names afc's sessions (a URL's own application_name wins): a
        # session holding the row another afc waits for is then told from a psql session
        args["fallback_application_name"] = "afc"
    args.update({k: v for k, v in KEEPALIVE_DEFAULTS.items() if k not in given})
    return args


@contextmanager
def _read_only(url: Any) -> Iterator[Any]:
    """A read-only connection to the ledger ``url`` names, outside any pool (``afc plan``'s
    reads: nothing is written, not even the schema), closed after the block. One lost in the
    block (a server restarted, its session terminated) is the ledger's error, as a refused
    one is, not psycopg's ("a bug in afc")."""
    check_url(str(url))
    psycopg = _psycopg()
    try:
        conn = _connect(str(url))
    except psycopg.Error as exc:
        raise connect_error(str(url), exc) from None
    conn.read_only = True
    try:
        yield conn
    except psycopg.OperationalError as exc:
        raise connect_error(str(url), exc) from None
    except psycopg.errors.InsufficientPrivilege as exc:
        # 'afc plan' as a role not granted afc's tables: "a bug in afc" before
        raise not_granted(display_url(str(url)), conn, exc) from None
    finally:
        conn.close()


def not_granted(path: str, conn: Any, exc: BaseException) -> LedgerError:
    """A read of the ledger the server refused its role as the ledger opens (exit 2): what
    to grant it, named."""
    user = _text(conn.info.user)
    return LedgerError(
        f"cannot read the ledger {path}: {first_line(exc)}: grant the role {user} afc's "
        f"tables (GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ... TO {user}, "
        "and USAGE, SELECT, UPDATE ON ALL SEQUENCES), then run this again; nothing was done"
    )


# The tables (and views) of the schema afc's tables would go in, the connection's current one,
# but afc's own migrations' table and an extension's (pg_stat_statements' views, which many
# servers install in every new database): ``refuse_foreign``.
FOREIGN_TABLES_SQL = (
    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'f')"
    f" AND c.relname <> '{MIGRATIONS_TABLE}' AND NOT EXISTS (SELECT 1 FROM pg_depend d"
    " WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')"
    " ORDER BY c.relname"
)


def _text(value: Any) -> str:
    """A name or setting as text: psycopg reads text as bytes from a SQL_ASCII database."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def refuse_foreign(conn: Any, path: str) -> None:
    """Refuse (exit 2, nothing written) a database that holds no afc ledger but tables of its
    own, as ``ledger_file.identity`` refuses such a SQLite file: another application's
    database (the URL of an app's database given as the ledger). afc created its twelve
    tables beside that application's, or, where one of them was named ``jobs``, stopped with
    "unexpected error: DuplicateTable ... (a bug in afc)" (``afc plan``: UndefinedTable), and
    a reading command said there was no ledger. ``conn``: its applied afc migrations are none."""
    tables = [_text(row[0]) for row in conn.execute(FOREIGN_TABLES_SQL)]
    if tables and _made_since(conn):
        return
    if tables:
        raise LedgerError(
            f"{path} is a PostgreSQL database with other tables ({', '.join(tables[:5])}"
            f"{', ...' if len(tables) > 5 else ''}), not an afc ledger; afc left it untouched: "
            "point --ledger at an empty database, or give afc a schema of its own there "
            "(CREATE SCHEMA afc, then ?options=-csearch_path%3Dafc in the URL)"
        )


def applied_migrations(conn: Any) -> list[str] | None:
    """Names of the afc migrations applied in the database ``conn`` reaches, in order, or
    None when it holds no migrations' table (``PostgresLedger._applied``, ``read_admitted``,
    ``_made_since``)."""
    if conn.execute("SELECT to_regclass(%s)", (MIGRATIONS_TABLE,)).fetchone()[0] is None:
        return None
    rows = conn.execute(
        f"SELECT name FROM {MIGRATIONS_TABLE} WHERE migration_set = 'afc' ORDER BY applied_at"
    ).fetchall()
    return [row[0] for row in rows]


def _made_since(conn: Any) -> bool:
    """Whether afc's schema is in the database now, though the caller of ``refuse_foreign``
    found none a moment before: another afc made it meanwhile (two hosts' first commands at
    one instant; its migrations' transaction committed between the two looks). Its tables
    were taken for another application's, and that host's first submit, worker or plan
    refused the ledger the other had just made ("not an afc ledger", exit 2)."""
    return bool(applied_migrations(conn))


def refuse_encoding(conn: Any, path: str) -> None:
    """Refuse (exit 2, nothing written) to make a ledger in a database whose encoding is not
    UTF-8. A SQLite ledger holds any text; in a database made in SQL_ASCII (``initdb`` in a C
    locale without ``-E UTF8``) psycopg reads text back as bytes, and every command, a
    submit's after its renders were paid for, stopped with "unexpected error: TypeError
    ... (a bug in afc)"; in LATIN1 (or another single-byte encoding) an output key, a
    storage folder or a provider's message in another script ("写真/{key}.{ext}") stopped
    the submit or the run with "UnicodeEncodeError ... (a bug in afc)"."""
    encoding = _text(conn.execute("SHOW server_encoding").fetchone()[0])
    if encoding.upper() not in ("UTF8", "UNICODE"):
        raise LedgerError(
            f"{path} is a PostgreSQL database in the {encoding} encoding; an afc ledger "
            "keeps prompts, paths, output keys and providers' messages in any script, and "
            "needs a UTF8 database (CREATE DATABASE afc ENCODING 'UTF8' TEMPLATE template0); "
            "afc left this one untouched"
        )


def holds_ledger(url: Any) -> bool:
    """Whether the database ``url`` names holds afc's schema, read without writing it (a
    submit refused before anything is written leaves an empty database empty)."""
    with _read_only(url) as conn:
        return conn.execute("SELECT to_regclass('jobs')").fetchone()[0] is not None


class PostgresLedger(Ledger):
    CLAIM_LOCK = " FOR UPDATE SKIP LOCKED"
    ROW_LOCK = " FOR UPDATE"
    CODE_POINT = ' COLLATE "C"'  # UTF-8 bytes: code point order, as on SQLite
    BATCH_ATTEMPTS = (  # Ledger.BATCH_ATTEMPTS says why
        "jobs j CROSS JOIN LATERAL (SELECT * FROM attempts a WHERE a.job_id = j.id OFFSET 0) a"
    )

    @staticmethod
    def _none_of(column: str, values: Collection[str]) -> tuple[str, list[Any]]:
        # One array parameter, one statement whatever their number: psycopg prepares a
        # statement once it ran five times and keeps 100. A worker's claim naming the jobs its
        # loop still runs one parameter each made a statement per count of them, past 100 at
        # --concurrency 33 and more: the statements of every job's writes were pushed out of
        # the cache and prepared again (tests/test_pg_claim_statements.py)
        return f"{column} <> ALL(?)", [list(values)]

    @staticmethod
    def _any_of(column: str, values: Collection[str]) -> tuple[str, list[Any]]:
        # one array parameter, one statement whatever their number, as ``_none_of``
        return f"{column} = ANY(?)", [list(values)]

    def _stream(self, sql: str, params: Any = ()) -> Iterator[list[dict[str, Any]]]:
        """``Ledger._stream`` through a server-side cursor (psycopg's client-side cursor
        holds the whole result at once): WITH HOLD, as the connection is in autocommit; the
        ledger's other queries may run between two chunks."""
        psycopg = _psycopg()
        try:
            cursor = self.db.raw.cursor(name=f"afc_stream_{os.getpid()}", withhold=True)
        except psycopg.OperationalError as exc:
            self.db.on_failure(exc)
            raise
        try:
            try:
                if params:
                    cursor.execute(translate(sql), list(params))
                else:  # no parameters: psycopg sends the text as it is (``PgDatabase.execute``)
                    cursor.execute(sql)
                names = [c.name for c in cursor.description]
                if getattr(self, "_one_moment", False):
                    # the moment's transaction (``read_one_moment``) ends here: its WITH HOLD
                    # cursor keeps the rows of that moment, and no transaction stays open
                    # while they are written out. Open until the last row ('afc status
                    # --json | less' left unread), it held its lock on jobs: a newer afc's
                    # migration waited behind it, then failed, every claim queued behind that
                    self._one_moment = False
                    self.db.execute("COMMIT")
            except psycopg.Error as exc:
                if not _refused(exc):
                    raise
                self.db.on_failure(exc)
                raise
            while True:
                try:
                    chunk = cursor.fetchmany(core.STREAM_ROWS)
                except psycopg.OperationalError as exc:
                    self.db.on_failure(exc)
                    raise
                if not chunk:
                    return
                yield [dict(zip(names, row, strict=True)) for row in chunk]
        finally:
            with contextlib.suppress(psycopg.Error):
                cursor.close()

    def __init__(
        self, url: str, *, create: bool = True, check: bool = False, reading: bool = False
    ):
        check_url(str(url))
        psycopg = _psycopg()
        self.url = str(url)
        self.path = display_url(self.url)  # named in messages; never the password
        try:
            # autocommit: a read outside a ``tx`` block never leaves a transaction open while
            # the run waits on a provider; a block is an explicit transaction (``tx``)
            conn = _connect(self.url, autocommit=True)
        except psycopg.Error as exc:
            raise connect_error(self.url, exc) from None
        self.db = PgDatabase(conn)
        self.db.on_failure = self._pipeline_failed
        self.owner = current_owner()
        self._depth = 0
        # (server epoch, ``awake_clock``, host epoch) at the last sample of the server's clock
        self._clock: tuple[float, float, float] | None = None
        self._clock_offset = 0.0
        self._last_read = 0.0  # ``lease_clock``'s last answer: it does not go back
        self._loop: Any = None  # the run loop under group commit (``grouped``)
        self._in_tx = False  # a transaction is open (a group's, between its blocks)
        self._tx_writes = self._block_writes = 0
        self._synced = self._block_sync = self._commit_at_end = False
        self._flush_scheduled = False
        self._waiters: list[Any] = []  # futures of ``committed`` callers
        self._broken = False
        self._broken_by: BaseException | None = None
        # the idle-in-transaction bound a run loop set (s; ``_bound_idle_transactions``) and
        # when the transaction open now began (``awake_clock``; None when none is open, or
        # the last one ended as it should): a connection lost once one was open that long
        # was most likely ended by the server for it (``write_error``)
        self._idle_bound: float | None = None
        self._tx_began: float | None = None
        # the connection's loss as first worded (``write_error``): said again as it was then
        self._worded: tuple[BaseException, Exception] | None = None
        try:
            # Commits wait for the disk only where money depends on it (module docstring): the
            # server's own setting is kept for those, the session's other commits are async.
            self._sync_setting = conn.execute("SHOW synchronous_commit").fetchone()[0]
            conn.execute("SET synchronous_commit = off")
            # No JIT compilation: its thresholds are estimated costs, which a batch's job
            # listing with its costs passes as soon as ``attempts`` was never analyzed (850 ms
            # of compiling for a 100-job run's summary, 25 ms to run; docs/ledger.md)
            conn.execute("SET jit = off")
            # READ COMMITTED, whatever default the server, the database or the role sets: the
            # ledger's writes are conditional UPDATEs re-checked on the row they lock (module
            # docstring), which SERIALIZABLE or REPEATABLE READ fail instead ("could not
            # serialize access due to read/write dependencies among transactions"). With
            # default_transaction_isolation = serializable, as some servers set for every
            # application, two of three workers started together stopped at their first claims
            # telling the operator to check the database server and the connection. A copy's
            # snapshot sets its own (``snapshot``).
            conn.execute("SET default_transaction_isolation = 'read committed'")
            applied = self._applied()
            if not applied:
                refuse_foreign(conn, self.path)
            if applied is None and not create:
                raise LedgerError(f"no ledger at {self.path} (run 'afc submit MANIFEST' first)")
            if not applied:  # afc's schema is to be made here
                refuse_encoding(conn, self.path)
            # (the migrations first: workers starting together wait for the one applying
            # them, which may take longer on a large ledger)
            self._migrate()
            if conn.execute("SHOW lock_timeout").fetchone()[0] == "0":
                conn.execute(f"SET lock_timeout = {int(LOCK_WAIT_S * 1000)}")
        except psycopg.OperationalError as exc:
            # the connection lost as the ledger opens (a server restarting, its session
            # terminated): the ledger's error, as a refused connection is, not "a bug in afc"
            conn.close()
            raise connect_error(self.url, exc) from None
        except psycopg.errors.InsufficientPrivilege as exc:
            # a role given none of afc's tables (a host's new role before its grant): its
            # first read, of the applied migrations, stopped every command with "unexpected
            # error: InsufficientPrivilege ... (a bug in afc)"
            refusal = not_granted(self.path, conn, exc)
            conn.close()
            raise refusal from None
        except BaseException:
            conn.close()
            raise

    # --- migrations -------------------------------------------------------------------------

    def _applied(self) -> list[str] | None:
        """Names of the migrations applied, or None if this database holds no afc ledger."""
        return applied_migrations(self.db.raw)

    def newer_migrations(self, wait: bool = False) -> list[str]:
        from afc_cli.ledger_file import known_migrations

        if wait:
            # a migration holds MIGRATION_LOCK until it commits (``_apply_migrations``)
            try:
                with self.tx():
                    self.db.execute("SELECT pg_advisory_xact_lock_shared(?)", (MIGRATION_LOCK,))
                    return self.newer_migrations()
            except LedgerWriteError as exc:
                if not _lock_wait(exc.__context__):  # raised 'from None' by ``tx``
                    raise
                # waited past lock_timeout (afc's LOCK_WAIT_S, or the role's) for a large
                # ledger's migration: said as 'another session held a lock on the ledger's
                # jobs too long (a psql session left in a transaction ...)'
                raise self._migrating() from None
        known = set(known_migrations())
        # through PgDatabase.execute: a lost connection is the ledger's error, as elsewhere
        rows = self.db.execute(
            f"SELECT name FROM {MIGRATIONS_TABLE} WHERE migration_set = 'afc'"
        ).fetchall()
        return [row[0] for row in rows if row[0] not in known]

    def _migrating(self) -> LedgerError:
        return LedgerError(
            f"another afc is migrating the ledger {self.path} (it held afc's migration "
            "lock past this session's lock_timeout): nothing was run; run this again "
            "once the migration has ended, with an afc as new as the one migrating it"
        )

    def refuse_migrating(self) -> None:
        # A worker polling during a newer afc's long migration: its claim waited for the
        # migration's lock on jobs past lock_timeout and said 'another session held a lock on
        # the ledger's jobs too long (a psql session left in a transaction ...)', exit 1.
        # Read on the connection as the failed claim left it (rolled back, ``_abort``)
        try:
            held = self.db.raw.execute(
                "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
                " AND mode = 'ExclusiveLock' AND classid = 0 AND objsubid = 1"
                " AND objid = %s::bigint::oid"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                (MIGRATION_LOCK,),
            ).fetchone()
        except Exception:  # the connection lost: the claim's own error says so
            return
        if held is not None:
            raise self._migrating()

    def _migrate(self) -> None:
        from afc_cli.ledger_file import known_migrations

        known = known_migrations()
        applied = self._applied() or []
        if set(known) <= set(applied) and not set(applied) - set(known):
            return
        # a newer afc's ledger is refused before anything is taken or made (``_apply_migrations``
        # refuses it again under the lock): a role that may not create in the schema was told
        # to be granted that, where the fix is a newer afc
        _refuse_newer(self.path, set(applied))
        pending = [name for name in known if name not in applied] if applied else []
        errors = _psycopg().errors
        # not watched (``StallWatch``): an index of a large ledger, or another afc's migration
        # waited for under the advisory lock, may take minutes
        stall = getattr(self.db.raw, "stall", None)
        if stall is not None:
            stall.paused = True
        try:
            done, made = self._apply_migrations(known)
        except errors.QueryCanceled:
            # a statement_timeout (the server's, the database's, the role's, PGOPTIONS') shorter
            # than a large ledger's migration takes: it said 'cannot connect to the ledger';
            # the transaction rolled back, nothing of the schema changed
            raise LedgerError(
                f"the ledger {self.path} needs migrations this afc brings "
                f"({', '.join(pending) or 'its schema'}), and the server cancelled one of their "
                "statements (a statement_timeout set on the server, the database or afc's "
                "role, shorter than migrating this ledger takes, or pg_cancel_backend). afc "
                "left the ledger untouched: unset it for afc's role (ALTER ROLE ... SET "
                "statement_timeout = 0) or raise it, then run this again"
            ) from None
        except errors.InvalidSchemaName:
            # no schema of the session's search_path exists (``?options=-csearch_path%3Dafc``
            # in the URL, or the role's, before CREATE SCHEMA afc, or the name misspelt):
            # a first submit stopped with "unexpected error: InvalidSchemaName: no schema has
            # been selected to create in ... (a bug in afc)"; the transaction rolled back
            path = _text(self.db.raw.execute("SHOW search_path").fetchone()[0])
            raise LedgerError(
                f"cannot make afc's tables in {self.path}: no schema of its search_path "
                f"({path}) exists in that database; create it (CREATE SCHEMA ...) or correct "
                "the name (the URL's ?options=-csearch_path%3D..., the role's or PGOPTIONS'), "
                "then run this again; afc left the database untouched"
            ) from None
        except errors.InsufficientPrivilege as exc:
            # A role that may read and write afc's tables but not change the schema (no CREATE
            # on it: PostgreSQL 15's default for every role but the database's owner, or not
            # the tables' owner, as a worker's role given only SELECT, INSERT, UPDATE, DELETE):
            # an empty database's first submit, or a newer afc's first command, stopped with
            # "unexpected error: InsufficientPrivilege ... (a bug in afc)". The transaction
            # rolled back: nothing of the schema changed.
            raise self._schema_refused(exc, pending) from None
        except errors.LockNotAvailable:
            # the transaction rolled back: nothing of the schema changed
            wait = self.db.raw.execute("SHOW lock_timeout").fetchone()[0]
            if wait == "0":
                wait = f"{LOCK_WAIT_S:g}s"
            raise LedgerError(
                f"the ledger {self.path} needs migrations this afc brings "
                f"({', '.join(pending) or 'its schema'}), and another session held a lock on "
                f"its tables past {wait} (a psql session or a tool left in a "
                "transaction on the ledger: pg_stat_activity shows it; while the migration "
                "waited, every other session's use of those tables queued behind it). afc "
                "left the ledger untouched: let that session end or end it, then run this again"
            ) from None
        finally:
            if stall is not None:
                stall.paused = False
        from afc_cli.ledger_file import say_migrated

        say_migrated(self.path, done, made)  # what this process applied, under the lock

    def _schema_refused(self, exc: BaseException, pending: list[str]) -> LedgerError:
        """``_migrate``'s refusal when the server denied afc's role a change of the schema:
        who to run afc as, or what to grant, named."""
        raw = self.db.raw
        user = _text(raw.info.user)
        schema = _text(raw.execute("SELECT current_schema()").fetchone()[0] or "public")
        why = first_line(exc)
        if not pending:  # no ledger here yet: afc's tables are to be made
            return LedgerError(
                f"cannot make afc's tables in {self.path}: the server refused the role "
                f"{user} ({why}). Grant it the schema (GRANT CREATE ON SCHEMA {schema} TO "
                f"{user}), or run afc's first command once as a role that may create tables "
                "there (the database's owner); afc left the database untouched"
            )
        return LedgerError(
            f"the ledger {self.path} needs migrations this afc brings ({', '.join(pending)}), "
            f"and the server refused the role {user} a change of its schema ({why}). Run this "
            "afc once as the role that owns the ledger's tables (the one that made them), "
            f"after which {user} runs it as before; afc left the ledger untouched"
        )

    def _apply_migrations(self, known: list[str]) -> tuple[int, list[str]]:
        """``_migrate``'s transaction. Its DDL (``ALTER TABLE`` takes an ACCESS EXCLUSIVE lock)
        and ``LOCK TABLE jobs`` wait at most ``LOCK_WAIT_S`` for a lock another session holds
        (unless the server, the role or PGOPTIONS set a lock_timeout), as every other
        statement of afc's does: with PostgreSQL's default of no bound, a psql session left
        in a transaction on the ledger held the first command of an upgraded afc for ever,
        without a word, and every other session's read of the table queued behind its
        waiting ALTER TABLE (a worker's claim, 'afc status'). The advisory lock is taken
        first, without that bound: whoever holds it is another afc applying these
        migrations, and a large ledger's take a while. Returns how many were applied before
        and the ones this transaction applied."""
        from afc_cli.ledger_file import check_no_live_runs, leases_sql
        from afc_cli.migrations import migrations

        raw = self.db.raw
        with raw.transaction():
            raw.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            if raw.execute("SHOW lock_timeout").fetchone()[0] == "0":
                raw.execute(f"SET LOCAL lock_timeout = {int(LOCK_WAIT_S * 1000)}")
            raw.execute(
                f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} (migration_set TEXT NOT NULL,"
                " name TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL,"
                " PRIMARY KEY (migration_set, name))"
            )
            done = {
                row[0]
                for row in raw.execute(
                    f"SELECT name FROM {MIGRATIONS_TABLE} WHERE migration_set = 'afc'"
                )
            }
            _refuse_newer(self.path, done)
            pending = [name for name in known if name not in done]
            if pending and "m001_initial" in done:
                # no claim or renewal commits between this look and the migration
                raw.execute("LOCK TABLE jobs IN EXCLUSIVE MODE")
                rows = raw.execute(leases_sql(done)).fetchall()
                now = raw.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()[0]
                check_no_live_runs(self.path, rows, float(now), pending)
            made = []
            for migration in migrations._migrations:
                if migration.name in done:
                    continue
                made.append(migration.name)
                self.db.migrating = True
                try:
                    migration.fn(self.db)
                finally:
                    self.db.migrating = False
                raw.execute(
                    f"INSERT INTO {MIGRATIONS_TABLE} (migration_set, name, applied_at)"
                    " VALUES ('afc', %s, %s)",
                    (migration.name, time.time()),
                )
        return len(done), made

    # --- engine -----------------------------------------------------------------------------

    def close(self) -> None:
        self.db.raw.close()

    def read_one_moment(self) -> None:
        # the autocommit connection's statements saw each its own moment (READ COMMITTED);
        # REPEATABLE READ: every read until close sees the first one's. Ended by ``close``,
        # or by the first listing streamed (``_stream``), whose rows are then kept
        self.db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        self._one_moment = True

    def day_sql(self, column: str) -> str:
        # the whole second the moment is in, as on SQLite (to_timestamp rounds to the
        # microsecond: a moment in a day's last half microsecond was the next day's)
        return f"to_char(to_timestamp(floor({column})) AT TIME ZONE 'UTC', 'YYYY-MM-DD')"

    SPOOL_PER_HOST = True
    LEASES_ON_WALL_CLOCK = False  # the server's clock (``lease_clock``), as core.py says

    def spool_root(self) -> Path:
        return self.spool_root_of(self.url)

    @staticmethod
    def spool_root_of(url: Any) -> Path:
        # this host's: a shared ledger has no folder beside it (README, several machines)
        from afc_cli.storage import home_expanded

        named = os.environ.get("AFC_SPOOL_DIR") or "afc-spool"
        # '~/spool' in a systemd unit's Environment= or a crontab, neither of which expands it,
        # is the home folder's, as a file:// storage's path is
        return Path(home_expanded(named, f"AFC_SPOOL_DIR={named!r}"))

    def spool_identity(self) -> str:
        # Every PostgreSQL ledger run here without AFC_SPOOL_DIR spools to ./afc-spool. This
        # database (its oid: two made from one template differ) and when afc's schema was
        # first applied to it (two databases, or two schemas of one, differ), not its URL,
        # which names one ledger in many ways (localhost or 127.0.0.1, a port given or not).
        return _spool_identity(self.db.execute(SPOOL_IDENTITY_SQL).fetchone())

    @staticmethod
    def read_spool_holder(url: Any, job_ids: Collection[str]) -> tuple[str | None, str, set]:
        """``spool_identity`` of the ledger ``url`` names, its name, and which of ``job_ids``
        are its jobs, read without writing anything (``afc plan``); no identity for a
        database afc's schema is not in yet (its first run marks the spool)."""
        with _read_only(url) as conn:
            named = display_url(str(url))
            if conn.execute(f"SELECT to_regclass('{MIGRATIONS_TABLE}')").fetchone()[0] is None:
                return None, named, set()
            identity = _spool_identity(conn.execute(SPOOL_IDENTITY_SQL).fetchone())
            known = {
                job_id
                for (job_id,) in conn.execute(
                    "SELECT id FROM jobs WHERE id = ANY(%s)", (list(job_ids),)
                )
            }
            return identity, named, known

    def snapshot(self) -> None:
        # READ COMMITTED sees each statement's moment; a copy must see one moment throughout
        self.db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")

    def chunks(self, sql: str, size: int) -> Iterator[list[tuple]]:
        # a server-side cursor, inside the block's transaction: psycopg's ordinary cursor
        # fetches a whole result before its first row (a copy's events table, all in memory)
        with self.db.raw.cursor(name="afc_chunks") as cursor:
            cursor.execute(sql)
            while rows := cursor.fetchmany(size):
                yield rows

    def lock_jobs(self) -> None:
        # EXCLUSIVE: plain reads go on; a claim's SELECT ... FOR UPDATE and every write of a
        # job wait for this transaction. Taken before the snapshot's first read, so that read
        # sees every claim committed before it. A transaction that wrote a job and never ends
        # (a run frozen in a write, its host cut off while the server keeps its session, a
        # psql session left open) is waited for COPY_LOCK_WAIT_S at most: the whole ledger's
        # runs would wait behind this request for as long.
        self.db.execute(f"SET LOCAL lock_timeout = {int(COPY_LOCK_WAIT_S * 1000)}")
        try:
            self.db.execute("LOCK TABLE jobs IN EXCLUSIVE MODE")
        except _psycopg().errors.LockNotAvailable:
            raise UsageError(
                f"the jobs of {self.path} are held by a transaction that did not end within "
                f"{COPY_LOCK_WAIT_S:g} s (a run stopped in the middle of a write, or a session "
                "left open: pg_stat_activity shows it); the copy gave up rather than hold every "
                "run's claims behind it (nothing was written): end it, then copy again"
            ) from None
        self.db.execute("SET LOCAL lock_timeout = 0")

    def _wait_for_copy(self) -> None:
        # ROW EXCLUSIVE, as any write of a job takes, conflicts with a copy's EXCLUSIVE lock
        # (``lock_jobs``): taken first, it waits for the copy to end; the reads that follow
        # (READ COMMITTED) then see the move it committed
        self.db.execute("LOCK TABLE jobs IN ROW EXCLUSIVE MODE")

    def columns(self, table: str) -> list[str]:
        return [
            row[0]
            for row in self.db.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ?"
                " AND table_schema = current_schema() ORDER BY ordinal_position",
                (table,),
            )
        ]

    def before_copy(self) -> None:
        """m019's insert trigger adds each copied attempt to its run's ``run_spend`` row, and
        the copy is one transaction: every update of one row in one transaction leaves a
        version the next must walk past, so a run's n attempts cost n²/2 of them. A workers'
        budget is never reset: a SQLite ledger whose budget had 300,000 attempts took 10 min
        52 s to copy into PostgreSQL, 15 s before m019. The copy's attempts go in with
        ``afc.copying`` set for its transaction alone, which the trigger's WHEN reads (m021),
        and ``after_copy`` sums them once, as m019 summed a ledger's attempts. Any role may
        set it: switching the trigger off (ALTER TABLE) was the table's owner's alone, and a
        role given table grants copied through the trigger."""
        from afc_cli.migrations import COPYING

        self.db.execute(f"SET LOCAL {COPYING} = 'on'")

    def after_copy(self) -> None:
        # rows came with their ids: the identity columns continue after the highest
        from afc_cli.ledger.copy import IDENTITY_TABLES

        for table in IDENTITY_TABLES:
            self.db.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'),"
                f" COALESCE((SELECT MAX(id) FROM {table}), 0) + 1, false)"
            )
        # the copied attempts are all the destination holds (it had no batch)
        from afc_cli.migrations import COPYING, RUN_SPEND_SUMMED

        self.db.execute("DELETE FROM run_spend")
        self.db.execute(RUN_SPEND_SUMMED)
        self.db.execute(f"SET LOCAL {COPYING} = 'off'")
        self.batches_grew()  # joins the copy's transaction

    def batches_grew(self) -> None:
        """The planner learns how many batches there are. A query over every batch names
        them as ``batch IN (SELECT name FROM batches)`` (``_batch_scope``), to be a lookup
        per batch in the (batch, status) index; but autovacuum analyzes a table only once
        50 of its rows changed, so a ledger's few batches were never counted, and the server
        took the table for 340 rows (its guess for a never-analyzed one) and read the whole
        index instead: at every worker's claim, twice (``settle_ready_blocked``), 0.5 ms at
        10,000 jobs and growing with the ledger. A few batches: a millisecond. Without the
        table's ownership the server only warns and skips it."""
        with self.tx():
            self.db.execute("ANALYZE batches")

    def _hold_budget(self, run_id: str | None) -> None:
        self._alone()
        # a transaction-scoped advisory lock per budget: workers on every host that share
        # this run id (afc worker --max-spend) check and reserve their estimates one at a time
        self.db.execute("SELECT pg_advisory_xact_lock(?, hashtext(?))", (BUDGET_LOCK, run_id or ""))

    def _hold_limit(self, provider: str) -> None:
        self._alone()
        # a transaction-scoped advisory lock per provider: the processes of every host check
        # and take that provider's shared limits one at a time
        self.db.execute("SELECT pg_advisory_xact_lock(?, hashtext(?))", (LIMIT_LOCK, provider))

    def _hold_walk(self, batches: Collection[str], *, shared: bool = False) -> None:
        # one walk of a batch at a time across processes (``Ledger._hold_walk``); taken again
        # by the same transaction (a rejection of several gates) it is already held. A
        # batch's key is computed here, so a rejection of several batches' gates takes their
        # locks in one order (the keys') whatever the batches are called, as every process
        # does. Tried first: held by another afc (a re-submit of 10,000 shots giving them a
        # new need holds it about 9 s, shared), the wait is said (``streams.say``), where the
        # command was silent until it ended, or until the lock timeout's error
        how = "advisory_xact_lock_shared" if shared else "advisory_xact_lock"
        keys = {zlib.crc32(batch.encode()) & 0x7FFFFFFF: batch for batch in batches}
        for key in sorted(keys):
            if not self._one(f"SELECT pg_try_{how}(?, ?) AS held", (WALK_LOCK, key))["held"]:
                streams.say(
                    f"waiting for another afc changing the jobs of batch {keys[key]!r} behind"
                    " their needs (a re-submit of it, a review decision, a cancel or a retry;"
                    f" for thousands of jobs, seconds), up to {LOCK_WAIT_S:g} s"
                )
                self.db.execute(f"SELECT pg_{how}(?, ?)", (WALK_LOCK, key))

    def _hold_output(self, output_key: str) -> Callable[[], bool]:
        # A transaction-scoped advisory lock per output key (a hash: two keys sharing one
        # only refuse each other for a moment), tried, never waited for: a group transaction
        # takes one for each job starting in it, and waiting for one while holding others
        # could deadlock two groups, where committing the group first (``_alone``, as the
        # budget's and the limits' locks do) would cost every attempt row a commit of its
        # own. Not taken: another process is checking this key now; the attempt is refused
        # (OutputBusy without a holder) and tried again a moment later. Sent without
        # waiting: its answer comes with the lookup's (one round trip).
        cursor = self.db.execute(
            "SELECT pg_try_advisory_xact_lock(?, hashtext(?))",
            (OUTPUT_LOCK, output_key),
            wait=False,
        )
        return lambda: bool(cursor.fetchone()[0])

    def _attempts_free(self, job_id: str) -> bool:
        """Whether no other transaction holds a row lock on the job's ``started`` attempts:
        locked here (``SKIP LOCKED`` takes the free ones and passes a locked one by), so the
        takeover's marking of them waits for nobody. Fewer taken than there are: another
        process is writing one now."""
        return self._takes_all(
            "SELECT number FROM attempts WHERE job_id = ? AND status = 'started'", [job_id]
        )

    def _takes_all(self, select: str, params: list[Any]) -> bool:
        """Whether ``select`` (rows of one table), locked ``SKIP LOCKED`` for this transaction,
        takes every row it finds unlocked: fewer taken than there are, another transaction
        holds one (``_attempts_free``, ``_lock_together``)."""
        there = self._count(f"SELECT COUNT(*) FROM ({select}) AS t", params)
        taken = self._count(f"SELECT COUNT(*) FROM ({select}{self.CLAIM_LOCK}) AS t", params)
        return taken >= there

    def _lock_together(self, job_ids: list[str]) -> None:
        """``Ledger._lock_together``: tries of ``FOR UPDATE SKIP LOCKED`` in a savepoint, one
        that did not take every row given back (rolled back to it, which lets go of the rows
        it took), until one takes them all. Waited for one row at a time, a re-submit holding
        the row of a job a run holds waited for another of that run's rows, while the run's
        renewal (every job it holds, one statement) held that one and waited for the first:
        a deadlock, which PostgreSQL broke by failing one (the run stopped, exit 1, or the
        submit). A run's write of its jobs lasts milliseconds; past ``LOCK_WAIT_S`` of tries
        (a transaction that does not end: a process stopped with its group open; runs
        writing the batch's jobs without a pause) the rows are taken without waiting
        (``NOWAIT``) or the block fails as a lock waited for too long (nothing it wrote kept,
        said). They were waited for one by one, in the writes' order, holding each row
        written while waiting for the next: the deadlock again, with a run's renewal, which
        locks its jobs in the order of its index (``jobs_lease_owner``), neither the
        manifest's nor the ids', inside a group transaction that may hold some of them
        already, so no order of this side's waits avoids it."""
        chunks = list(core._chunks(sorted(set(job_ids)), core.IN_CHUNK))
        deadline = time.monotonic() + LOCK_WAIT_S
        while time.monotonic() < deadline:
            self.db.execute("SAVEPOINT afc_together")
            # (a job gone meanwhile is no row to wait for)
            if all(
                self._takes_all(f"SELECT id FROM jobs WHERE id IN {core._marks(c)}", c)
                for c in chunks
            ):
                self.db.execute("RELEASE SAVEPOINT afc_together")
                return
            self.db.execute("ROLLBACK TO SAVEPOINT afc_together")
            time.sleep(CLAIM_ROW_RETRY_S)
        for c in chunks:  # (lock_not_available, as a lock_timeout: ``ledger_write_error``)
            self.db.execute(
                f"SELECT id FROM jobs WHERE id IN {core._marks(c)} FOR UPDATE NOWAIT", c
            )

    def renew_leases(self, lease_s: float, *, stale: bool = False) -> int:
        """``Ledger.renew_leases``: every job this run holds whose row no other transaction
        holds now (``SKIP LOCKED``); returns how many it held were not renewed, which
        ``run._renew`` tries again every ``RENEW_RETRY_S`` (``stale``: only the leases not
        renewed in the last third of one) until they are. One statement over them all waited
        at the first row another transaction held (a re-submit writing the batch's webhooks
        or gates: up to ``LOCK_WAIT_S`` while it waits on a stalled holder of its own, or as
        long as it is stalled), the run's event loop stopped meanwhile, the rows after it in
        its order neither renewed nor locked: a lease shorter than the wait
        (``AFC_LEASE_S``) ran out on them, and another host took those jobs over and paid for
        them again while this run's calls were in flight. A row the other transaction holds
        cannot be taken over while it holds it (a takeover locks the row first); let go, its
        lease may have run out meanwhile, and the tries renew it within moments, before the
        re-submit's own run, or another host's, looks for jobs to take over."""
        terminal = core.TERMINAL_SQL
        mine = f"lease_owner = ? AND status NOT IN {terminal}"
        params: tuple = (self.owner,)
        if stale:
            mine += " AND lease_expires < ?"
            params = (self.owner, self.lease_clock() + lease_s * 2 / 3)
        # FOR NO KEY UPDATE, the lock the UPDATE itself takes: FOR UPDATE (``CLAIM_LOCK``)
        # also conflicts with the FOR KEY SHARE that a foreign key takes on the job's row
        # while another transaction writes an attempt, step or delivery of it, and passed
        # such a row by as held, its lease left to run out for as long as that transaction
        # lasted, where the UPDATE never waited for it
        with self.tx():
            # counted before the renewal: counted after, a stale try's renewed rows were no
            # longer stale, and taking their number off the held ones left said none was
            # held, the tries given up for a third of a lease while a row was still held
            held = self._count(f"SELECT COUNT(*) FROM jobs WHERE {mine}", list(params))
            renewed = self._write_lease(
                f"id IN (SELECT id FROM jobs WHERE {mine} FOR NO KEY UPDATE SKIP LOCKED)",
                params,
                lease_s,
            )
        return max(0, held - renewed)

    def _count(self, sql: str, params: list[Any]) -> int:
        return int(self.db.execute(sql, params).fetchone()[0])

    def _claimable(self, job_id: str) -> dict[str, Any] | None:
        """The job's row, locked for this transaction, or None when it is gone or another
        transaction held its lock through ``CLAIM_ROW_WAIT_S`` of tries. Waited for without a
        bound (a plain ``FOR UPDATE``, or the claim's ``UPDATE``), a transaction that never
        ended held the claiming run for as long: a worker stopped (SIGSTOP, a suspended
        laptop, a paused VM) with its group transaction open, or a psql session left in one,
        stopped every 'afc resume' at the first job of its rows whose lease had run out, its
        event loop blocked, so its own leases lapsed for other hosts to take over and pay for
        again. Such a job is held as by a live run: not run here."""
        deadline = time.monotonic() + CLAIM_ROW_WAIT_S
        while True:
            job = self._one(f"SELECT * FROM jobs WHERE id = ?{self.CLAIM_LOCK}", (job_id,))
            if job is not None or self.job(job_id) is None:
                return job
            if time.monotonic() >= deadline:
                return None
            time.sleep(CLAIM_ROW_RETRY_S)

    def _let_go_of_output(self) -> None:
        # A refusal writes nothing, so under group commit the shared transaction went on
        # (``_abort``), holding the key's lock until the process's next commit: a process
        # whose only job waits for the key commits nothing between its looks, and kept the
        # lock for as long as it waited, refusing the holding job's next attempt (its chain's
        # fallback) every 50 ms. The block commits at its end, as a refused ``_alone`` does.
        self._commit_at_end = True

    def lease_clock(self) -> float:
        """Now, by the database's clock: the time every host's leases are measured in.

        Sampled from the server (``clock_timestamp()``) at most every ``CLOCK_SAMPLE_S``
        seconds (and at once when this host's wall clock moved against ``owner.awake_clock``
        by more than that: stepped, or a paused VM), and advanced between samples by
        ``awake_clock`` (a monotonic clock that counts a suspend), which no change of the wall
        clock moves: hosts whose clocks disagree still agree on when a lease expired (to
        within a round trip), and a claim or renewal costs no round trip for it."""
        mono = awake_clock()
        due = (
            self._clock is None
            or mono - self._clock[1] > CLOCK_SAMPLE_S
            or abs((core._now() - self._clock[2]) - (mono - self._clock[1])) > CLOCK_SAMPLE_S
        )
        # not in a group's pipeline, unless there is no sample yet: a read outside any block
        # would answer for the group's pending statements (a later block's wait does)
        if self._clock is None or due and self.db.pipe is None:
            self._sample_clock()
            mono = awake_clock()
        now = self._clock[0] + (mono - self._clock[1])
        # A new sample re-anchors the clock within its round trip's error, which can put it
        # a few milliseconds behind this process's last reading. Now does not go back in one
        # process by so little: a delivery queued at one reading is due at every later one
        # (a run's last webhook pass, afc_cli/webhooks.py). A real step of the server's
        # clock (more than ``CLOCK_HELD_S``) is followed.
        if self._last_read - CLOCK_HELD_S < now < self._last_read:
            now = self._last_read
        self._last_read = now
        return now

    def _sample_clock(self) -> None:
        """Read the server's clock; keep it (as of the end of the round trip) beside this
        host's ``owner.awake_clock`` and wall clock, and the offset ``clock_offset`` reports."""
        before, host_before = awake_clock(), core._now()
        server = float(
            self.db.execute("SELECT EXTRACT(EPOCH FROM clock_timestamp())").fetchone()[0]
        )
        after, host_after = awake_clock(), core._now()
        half = (after - before) / 2  # the server read its clock about halfway through
        self._clock = (server + half, after, host_after)
        # An offset within the round trip's error is no offset (0: the server read its clock
        # between our two readings), so a host whose clock agrees with the server's, or the
        # server's own host, stores its times unchanged.
        offset = server - (host_before + host_after) / 2
        self._clock_offset = offset if abs(offset) > (host_after - host_before) / 2 else 0.0

    def clock_offset(self) -> float:
        """The server's clock minus this host's, as of the last sample of ``lease_clock``:
        the server's time against the midpoint of the query's round trip, so its error is at
        most half of that round trip (milliseconds on a network where a ledger is usable)."""
        self.lease_clock()
        return self._clock_offset

    # --- transactions -----------------------------------------------------------------------

    @contextmanager
    def tx(
        self, *, durable: bool = False, commit: bool = False, sync_on_commit: bool = False
    ) -> Iterator[PgDatabase]:
        """One atomic state change: a nested block joins the block around it; an exception
        rolls back what the block wrote.

        Outside group commit, each outermost block is its own transaction, committed when it
        ends. Under group commit (``grouped``: a run loop), blocks share one transaction,
        committed every few milliseconds (``GROUP_COMMIT_S``), so many jobs' changes share
        one commit; a block asking ``commit`` or ``durable`` commits it at its end. Blocks
        never span an ``await``.

        ``durable`` / ``sync_on_commit``: the commit that holds this block waits for the
        server's disk (module docstring). Under group commit, the pipeline awaits
        ``committed()`` after starting an attempt: the attempt rows of the jobs starting
        together share one synced commit before their provider calls.

        A failed statement aborts a PostgreSQL transaction, and a refusal raised after a
        block wrote (none is: JobLost, BudgetExhausted and ProviderBusy are raised before a
        block writes) takes that block's writes back: the shared transaction is rolled back,
        and if it held other blocks' changes the run stops (``_broken``; the next write raises
        the ledger error): the ledger is then exactly as of the last commit, which every run
        resumes from, as on SQLite (sqlite.py).
        """
        if self._broken:
            raise self.write_error(self._broken_by or "the connection failed")
        wants_sync = durable or sync_on_commit
        if self._depth:
            if wants_sync:  # the enclosing transaction's commit waits for the disk too
                self._sync_commit()
            if durable or commit:
                self._commit_at_end = True
            self._depth += 1
            try:
                yield self.db
            finally:
                self._depth -= 1
            return
        psycopg = _psycopg()
        if self._loop is None and self._in_tx:  # a group left open: commit it first
            self.flush()
        if not self._in_tx:
            try:
                self._begin()
            except psycopg.OperationalError as exc:  # the connection is gone: the run stops
                self._abort(exc, psycopg)
                raise self.write_error(exc) from None
        self._block_writes = self.db.writes
        self._block_sync = wants_sync
        self._depth = 1
        self._commit_at_end = self._loop is None or durable or commit
        try:
            if wants_sync:
                self._sync_commit()
            yield self.db
        except BaseException as exc:
            self._depth = 0
            self._abort(exc, psycopg)
            # the server or the connection; or a server that refuses every write now (made
            # read-only for maintenance, ALTER SYSTEM SET default_transaction_read_only, or
            # a standby after a failover): its ReadOnlySqlTransaction, met by a job beside
            # calls in flight, was "unexpected error ... (a bug in afc)", which cancelled
            # those calls (recorded unknown, their renders unkept, to be paid for again)
            # So is a privilege the role lost under the run (a REVOKE on the ledger's tables):
            # "unexpected error: InsufficientPrivilege ... (a bug in afc)" cancelled the calls
            # in flight as well
            if isinstance(
                exc,
                psycopg.OperationalError
                | psycopg.errors.ReadOnlySqlTransaction
                | psycopg.errors.InsufficientPrivilege,
            ):
                raise self.write_error(exc) from None
            raise
        self._depth = 0
        if self._commit_at_end:
            self.flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_later(GROUP_COMMIT_S, self._scheduled_flush)

    def _begin(self) -> None:
        if self._loop is not None and self.db.pipe is None:
            self.db.open_pipeline()
        self._tx_began = awake_clock()
        self.db.raw.execute("BEGIN")
        self._in_tx = True
        self._tx_writes = self.db.writes  # to tell whether other blocks wrote in it
        self._synced = False

    def _abort(self, exc: BaseException, psycopg: Any) -> None:
        """A block raised: roll back if it wrote, its transaction failed, or it is a
        transaction of its own; the run stops if that took other blocks' changes (``tx``)."""
        from psycopg.pq import TransactionStatus

        raw = self.db.raw
        if isinstance(exc, psycopg.OperationalError) or raw.closed:
            self._broken, self._broken_by, self._in_tx = True, exc, False
            self._close_pipeline()
            if not raw.closed:
                # the server refused the statement and the connection stayed up (a lock
                # waited for past lock_timeout, a deadlock it broke, a cancelled statement):
                # its transaction is rolled back, the run's writes refused from here. Left
                # aborted, the draining run's next read (a poll's look at its job) failed with
                # InFailedSqlTransaction as "a bug in afc" (make chaos-postgres)
                with contextlib.suppress(psycopg.Error):
                    raw.execute("ROLLBACK")
            self._fail_waiters(exc)
            return
        failed = isinstance(exc, psycopg.Error) or (
            raw.info.transaction_status == TransactionStatus.INERROR
        )
        wrote = self.db.writes != self._block_writes
        if not (failed or wrote or self._loop is None):
            # Nothing of it to take back: the shared transaction goes on. But a block that was
            # to end it (one that took an advisory lock, ``_alone``: a limit or budget check
            # that refused with ProviderBusy or BudgetExhausted) ends it now: left open, the
            # lock would be held until the group's next commit, and every other worker's
            # check would wait on it, the holder's own finished calls unrecorded meanwhile.
            if self._commit_at_end:
                self.flush()
            return
        self._close_pipeline()
        try:
            raw.execute("ROLLBACK")
            self._tx_began = None
        except psycopg.Error as error:
            self._broken, self._broken_by = True, error
        self._in_tx = False
        if self._block_writes != self._tx_writes:  # other blocks' changes went with it
            self._broken, self._broken_by = True, exc
            self._fail_waiters(exc)

    def _pipeline_failed(self, exc: BaseException) -> None:
        """A pipelined statement's error, or a lost connection, surfaced in a read outside any
        block (a block's own failure is ``_abort``'s): the group is lost, so the run stops with
        the ledger's error."""
        if self._depth:
            return
        self._close_pipeline()
        with contextlib.suppress(Exception):
            self.db.raw.execute("ROLLBACK")
        self._in_tx = False
        self._broken, self._broken_by = True, exc
        self._fail_waiters(exc)
        raise self.write_error(exc) from None

    def _close_pipeline(self) -> None:
        """Leave pipeline mode after a failure (the failure is already being handled)."""
        with contextlib.suppress(Exception):
            self.db.close_pipeline()
        self.db.pipe = self.db._pipe_cm = None

    def _fail_waiters(self, exc: BaseException) -> None:
        waiters, self._waiters = self._waiters, []
        self._settle(waiters, exc)

    def _alone(self) -> None:
        """core.Ledger._alone under group commit: the other blocks' changes are committed
        first and this block commits at its end, so whatever it waits for (an advisory lock
        of the budget or a provider's limits, another run's job row) it waits for holding no
        other job's row, and an advisory lock is held for one block and taken in one order
        (budget, then provider) by every process: no deadlock, no lock held for a group."""
        if (
            self._loop is not None
            and self._depth == 1
            and self.db.writes == self._block_writes  # this block wrote nothing yet
            and self._block_writes != self._tx_writes  # others did
        ):
            waiters, self._waiters = self._waiters, []
            self.db.raw.execute("COMMIT")
            if self.db.pipe is not None:
                self.db.pipe.sync()  # committed before the waiters are told
            self._begin()
            self._block_writes = self.db.writes
            if self._block_sync:
                self._sync_commit()
            self._settle(waiters)
        self._commit_at_end = True

    def _sync_commit(self) -> None:
        """Make the open transaction's commit wait for the disk (once per transaction)."""
        if self._sync_setting != "off" and not self._synced:
            self.db.raw.execute(
                "SELECT set_config('synchronous_commit', %s, true)", (self._sync_setting,)
            )
        self._synced = True

    def _scheduled_flush(self) -> None:
        """A group commit from the event loop; a failure stops the run (``tx``)."""
        try:
            self.flush()
        except Exception as exc:  # noqa: BLE001 - reported to the run through _broken
            self._broken, self._broken_by = True, exc

    def flush(self) -> None:
        """Commit the shared transaction, if one is open and no block is running."""
        self._flush_scheduled = False
        if self._depth:
            return
        waiters, self._waiters = self._waiters, []
        if self._in_tx:
            self._in_tx = False
            try:
                self.db.raw.execute("COMMIT")
                self.db.close_pipeline()  # waits for the COMMIT and all sent before it
                self._tx_began = None  # ended as it should: none open to be ended for
            except BaseException as exc:
                psycopg = _psycopg()
                self._close_pipeline()
                if not self.db.raw.closed:
                    with contextlib.suppress(psycopg.Error):
                        self.db.raw.execute("ROLLBACK")
                self._waiters = waiters
                self._fail_waiters(exc)
                if isinstance(exc, psycopg.Error):
                    raise self.write_error(exc) from None
                raise
        self._settle(waiters)

    async def committed(self) -> None:
        """Return once everything written so far is committed (synced where a block asked).

        Under group commit, callers that ask in the same turn of the event loop share one
        commit, at the next turn: the attempt rows of jobs starting together are committed
        before any of their provider calls, with one commit instead of one each."""
        if self._loop is None or not self._in_tx:
            return
        await self._join_commit()

    @contextmanager
    def grouped(self, loop: Any) -> Iterator[None]:
        """Group commit for the duration of a run on ``loop``; everything is committed after.

        Meanwhile the server ends this session should it stay idle in a transaction for a
        whole lease (``_bound_idle_transactions``), and a wait on the server is cut once it
        lasts a third of a lease (``_bound_stalls``)."""
        self._bound_idle_transactions()
        kept = self._bound_stalls()
        waits = self._bound_lock_waits(kept)
        self._loop = loop
        try:
            yield
        finally:
            if kept is not None:
                self.db.raw.stall.limit_s, self.db.raw.stall.because = kept
            if waits is not None and not self._broken and not self.db.raw.closed:
                with contextlib.suppress(Exception):
                    self.db.raw.execute(f"SET lock_timeout = '{waits}'")
            self._loop = None
            if self._in_tx and not self._broken:
                self.flush()
            # (a broken run keeps its bound: its error, said after the loop, names a freeze)
            if self._idle_bound is not None and not self._broken and not self.db.raw.closed:
                with contextlib.suppress(Exception):
                    self.db.raw.execute("RESET idle_in_transaction_session_timeout")
                self._idle_bound = None

    def _bound_stalls(self) -> tuple[float, str] | None:
        """Cut a wait on the server (``StallWatch``) once it lasts a third of a lease
        (``AFC_LEASE_S``, at least ``STALL_FLOOR_S``) for as long as the run loop lasts, where
        ``AFC_PG_STALL_S`` (300 s) would wait longer; returns the limit and reason to restore.

        The wait holds the run's event loop, so the run renews no lease meanwhile, and a
        wait that outlasts what is left of its leases (a connection black-holed between this
        host and the server, a backend stopped while the server answers the others) let
        another host take its jobs over and pay for them again while this run's calls were
        in flight: with the defaults (both 300 s) every lease ran out before the cut, and the
        renders this run paid for were stored too late for the other host's probe, left
        ``unknown`` without their cost. Cut at a third of a lease, the run stops (exit 1)
        with a third of its lease at least still its own: its calls end within the grace and
        their renders are stored under their output keys (``pipeline.store_kept``), where the
        other host's probe finds them, once the leases run out, and records them at their
        cost. A watch turned off (``AFC_PG_STALL_S=0``) stays off."""
        from afc_cli.run import lease_seconds

        stall = getattr(self.db.raw, "stall", None)
        if stall is None:
            return None
        lease = lease_seconds()
        bound = max(lease / 3, STALL_FLOOR_S)
        if bound >= stall.limit_s:
            return None
        kept = (stall.limit_s, stall.because)
        stall.limit_s = bound
        stall.because = f"a third of its lease, AFC_LEASE_S = {lease:g} s"
        return kept

    def _bound_lock_waits(self, kept: tuple[float, str] | None) -> str | None:
        """While ``_bound_stalls`` cuts a wait sooner than the session's ``lock_timeout``
        (``LOCK_WAIT_S``, 30 s, or the role's), end a wait for a lock before it: at
        ``LOCK_SHARE`` of the stall bound. A lock wait is no stalled server, and cut by the
        watch it was said as one ("did not answer for 5 s ...: a backend that stopped (its
        server's disk hung ...)", ``AFC_LEASE_S=15``), where the lock error names the session
        to look for (pg_stat_activity) (tests/test_audit65h_lock_wait_in_run.py). Returns the ``lock_timeout`` to restore
        at the loop's end, or None where it was left as it was."""
        if kept is None or self._in_tx or self._broken:
            return None
        raw = self.db.raw
        bound_ms = int(raw.stall.limit_s * LOCK_SHARE * 1000)
        try:
            # its value as SHOW gives it (to restore) and in milliseconds, in one round trip
            was, current_ms = raw.execute(
                "SELECT current_setting('lock_timeout'), setting::bigint FROM pg_settings"
                " WHERE name = 'lock_timeout'"
            ).fetchone()
            if current_ms != 0 and current_ms <= bound_ms:
                return None
            raw.execute(f"SET lock_timeout = {bound_ms}")
        except _psycopg().Error as exc:
            self._broken, self._broken_by = True, exc
            raise self.write_error(exc) from None
        return was

    def _bound_idle_transactions(self) -> None:
        """Have the server end this session once it stays idle in a transaction for a whole
        lease (``AFC_LEASE_S``): a run's group transaction is committed within milliseconds
        (``GROUP_COMMIT_S``), so one left open that long is a run frozen in it (SIGSTOP,
        Ctrl-Z, a paused VM, a swap storm). Its uncommitted writes lock its jobs' rows (and
        their attempts'), which every claim passes by (``SKIP LOCKED``) and a takeover leaves
        to their holder: they were taken over by no other worker for as long as it stayed
        frozen, their leases long run out, and each 'afc worker --until-idle' beside it
        waited for them. Ended, its writes roll back, the rows are free, and the jobs are
        taken over once their leases run out, as a frozen run's are between transactions;
        the woken run finds its connection lost and stops, keeping its calls' renders, as
        README says ("Running on several machines"). A timeout the server, the database,
        the role or PGOPTIONS sets is kept, as ``lock_timeout`` is. Set here, the bound is
        ``_idle_bound`` (``write_error`` reads it), until the loop's end resets it."""
        if self._in_tx or self._broken:
            return
        from afc_cli.run import lease_seconds

        raw = self.db.raw
        try:
            if raw.execute("SHOW idle_in_transaction_session_timeout").fetchone()[0] != "0":
                return
            bound = lease_seconds()
            raw.execute(f"SET idle_in_transaction_session_timeout = {int(bound * 1000)}")
        except _psycopg().Error as exc:
            self._broken, self._broken_by = True, exc
            raise self.write_error(exc) from None
        self._idle_bound = bound

    def write_error(self, exc: BaseException | str) -> Exception:
        """The ledger's error for a failed write (``errors.ledger_write_error``), saying so
        where the connection was lost with a transaction of the run loop open for a whole
        lease or longer: the server ended the session for it (``_bound_idle_transactions``),
        this process having been stopped or starved that long. Said as the database server or
        the connection to check, a worker woken from a Ctrl-Z, a paused VM or a SIGSTOP sent
        its operator to look for an outage that never was.

        Judged once, when the loss is met: the run says the same failure again (its next
        writes, its last word after the loop, ``_broken_by``) as it was first worded. Judged
        anew each time, a session the server ended (a restart, a failover, an operator's
        pg_terminate_backend) while a call was in flight was first 'check the database
        server', then, said again once the call came back seconds later, 'this process was
        stopped or starved that long', its transaction 'open 7 s' though none was open. Nor
        is a loss met with no transaction open (the last one committed or rolled back:
        ``_tx_began`` None) said so, however long ago the last began."""
        if self._worded is not None and self._worded[0] is exc:
            return self._worded[1]
        lost = exc
        bound = self._idle_bound
        if (
            bound is not None
            and not isinstance(exc, LedgerWriteError)
            and (isinstance(exc, _psycopg().OperationalError) or self.db.raw.closed)
        ):
            held = 0.0 if self._tx_began is None else awake_clock() - self._tx_began
            if held >= bound:
                exc = FrozenSession(
                    f"the database server ended this process's session, its transaction "
                    f"open {held:.0f} s, longer than its lease (AFC_LEASE_S = {bound:g} s; "
                    f"idle_in_transaction_session_timeout): this process was stopped or "
                    f"starved that long (a Ctrl-Z, a SIGSTOP, a paused machine?), and its "
                    f"jobs were let go to other runs ({first_line(exc)})"
                )
        worded = ledger_write_error(self.path, exc)
        if isinstance(lost, BaseException) and not isinstance(lost, LedgerWriteError):
            self._worded = (lost, worded)
        return worded

    @staticmethod
    def read_admitted(
        url: str, batch: str, models: Collection[tuple[str, str]] = ()
    ) -> tuple[str | None, str | None, dict, dict, str | None, dict, list, tuple]:
        with _read_only(url) as conn:
            done = set(applied_migrations(conn) or ())
            if not done:  # refused as the submit refuses it: another application's, or
                refuse_foreign(conn, display_url(str(url)))  # one not in UTF8
                refuse_encoding(conn, display_url(str(url)))
            if conn.execute("SELECT to_regclass('jobs')").fetchone()[0] is None:
                return None, None, {}, {}, None, {}, [], (None, None)
            # a newer afc's ledger is refused, as the submit refuses it (and SQLite's plan)
            _refuse_newer(display_url(str(url)), done)
            storage, endpoint, marked = admitted_storage(conn, batch, "%s")
            # a ledger before m007 (read-only: not migrated) has no review and no needs
            gated = conn.execute("SELECT to_regclass('job_needs')").fetchone()[0] is not None
            # each lease's expiry as this host's clock says it (afc plan compares it with
            # that): written on the server's clock, it was read as this host's, and a host
            # ahead of the server by more than a lease had left took a live worker's job for
            # a free one (its changed gates planned to apply, where the submit keeps them)
            # a ledger before m009 (read-only: not migrated) has no lease on a host's
            # monotonic clock (``owner.lease_held``: its own host's, not re-based)
            mono = conn.execute(
                "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()"
                " AND table_name = 'jobs' AND column_name = 'lease_mono'"
            ).fetchone()
            jobs = {
                key: tuple(rest)
                for key, *rest in conn.execute(
                    "SELECT key, request_hash, status, request_json, "
                    + ("review" if gated else "0")
                    + ", attempts, lease_owner,"
                    " lease_expires - EXTRACT(EPOCH FROM clock_timestamp())::float8 + %s,"
                    " waiting_reason, output_key, "
                    + ("inputs_json" if gated else "NULL")  # as SQLite's, for a conflict
                    + (", lease_mono" if mono else ", NULL")
                    + " FROM jobs WHERE batch = %s",
                    (time.time(), batch),
                )
            }
            needs = admitted_needs(conn, batch, "%s") if gated else {}
            # a ledger before m010 (read-only: not migrated) was never moved
            moves = conn.execute("SELECT to_regclass('ledger_moves')").fetchone()[0] is not None
            moved = moved_to(conn) if moves else None
            # a ledger before m006 (read-only: not migrated) has no retries to count from
            based = conn.execute(
                "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()"
                " AND table_name = 'jobs' AND column_name = 'attempt_base'"
            ).fetchone()
            history = admitted_history(conn, batch, "%s") if based else {}
            answers = priced_answers_of(conn, batch, models, "%s", PostgresLedger.BATCH_ATTEMPTS)
            return storage, endpoint, jobs, needs, moved, history, answers, marked
