"""Which file is a ledger, and whether afc may use it: checked before anything is written.

- **Where.** ``--ledger`` / ``AFC_LEDGER`` is a plain path (a leading ``~`` the home folder)
  or a ``sqlite:///`` URL (the SQLAlchemy form: ``sqlite:///afc.db`` is relative,
  ``sqlite:////var/afc/afc.db`` absolute).
  A ``postgresql://`` URL is a PostgreSQL ledger (afc_cli/ledger/postgres.py), never a file;
  any other URL scheme is refused with exit 2, never taken for a folder name.
- **Whose.** afc stamps its ledgers: SQLite's ``application_id`` is ``APPLICATION_ID`` and
  ``user_version`` the number of schema migrations applied. A database that is another
  application's (another ``application_id``, or tables of its own and no afc migrations) is
  refused untouched: opening it does not even switch it to WAL. A ledger whose schema is newer
  than this afc (a migration it does not know) is refused with both versions named, since this
  version would write rows the newer schema does not expect. Ledgers from before the stamp
  (afc's migrations, no ``application_id``) are stamped when next opened. A ledger this afc
  would migrate is not migrated while a live process (an older afc) holds a job's lease
  (``check_no_live_runs``).
- **Whether.** A ledger that cannot be written (a read-only file, folder or file system), a
  ledger path under a regular file, and a damaged file are each one message naming the file and
  the fix, exit 2.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import stat
import time
from pathlib import Path

from afc_cli.errors import LedgerError, UsageError

APPLICATION_ID = 0x61666331  # "afc1"
MIGRATION_SET = "afc"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def is_postgres(value: object) -> bool:
    """Whether a ``--ledger`` value names a PostgreSQL ledger (``postgresql://``)."""
    match = _SCHEME.match(str(value)) if value is not None else None
    return match is not None and match.group(1).lower() in ("postgresql", "postgres")


# a libpq connection string in key=value form ("host=db dbname=afc password=..."), which
# psycopg and libpq accept: it starts with one of their keywords and '='
_CONNINFO = re.compile(
    r"^\s*(host|hostaddr|port|dbname|user|password|passfile|service|sslmode|"
    r"connect_timeout|application_name|options|target_session_attrs)\s*=",
    re.IGNORECASE,
)


# a PostgreSQL URL mistyped ('postgresql:/user:pw@host/db', 'postgres:user:pw@host/db',
# 'postgresql//...'), which ``_SCHEME`` does not read as a URL
_POSTGRES_TYPO = re.compile(r"^\s*postgres(?:ql)?(?::|//)", re.IGNORECASE)


def ledger_path(value: str | Path) -> Path:
    """The SQLite file a ``--ledger`` value names; other URL schemes are refused, and so is a
    PostgreSQL connection string in libpq's key=value form: taken for a file name, it started
    a new SQLite ledger named after it (its password in the name) beside the shared one."""
    text = str(value)
    if not text:
        # '--ledger=' (a variable left unset in a script): read as a path, it named the
        # working directory ('the ledger . is a folder')
        raise UsageError(
            "--ledger is empty: name the ledger, a SQLite file (afc.db when the option is "
            "left out) or a postgresql:// URL"
        )
    match = _SCHEME.match(text)
    if match is None:
        if _CONNINFO.match(text):
            # not echoed: it may hold the password
            raise UsageError(
                "the ledger is a PostgreSQL connection string in key=value form (host=... "
                "dbname=...), which afc does not read: write it as a URL, "
                "postgresql://USER@HOST:PORT/DBNAME (the password from PGPASSWORD or "
                "~/.pgpass), or name a SQLite file"
            )
        if _POSTGRES_TYPO.match(text):
            # not echoed either: 'postgresql:/afc:PASSWORD@db/afc' (a '/' lost) was taken for
            # a path, and the message that no such ledger or folder exists quoted it whole
            raise UsageError(
                "the ledger starts like a PostgreSQL URL but not with 'postgresql://' (a '/' "
                "or ':' missing): write it as postgresql://USER@HOST:PORT/DBNAME "
                "(the value is not shown here: it may hold the password)"
            )
        # '~' is the home folder, as a shell makes it: systemd's Environment= and crontab
        # lines do not expand it, and AFC_LEDGER=~/afc.db was refused as a folder '~' that
        # does not exist, without saying that '~' was the reason (AFC_SPOOL_DIR and file://
        # storage read it so too: ``storage.home_expanded``)
        from afc_cli.storage import home_expanded

        return _on_disk(Path(home_expanded(text, f"ledger {text!r}")), text)
    scheme = match.group(1).lower()
    if scheme == "sqlite":
        rest = text[len(match.group(0)) :]
        if not rest.startswith("/") or rest == "/":
            raise UsageError(
                f"ledger {text!r}: write a SQLite URL as sqlite:///relative/path.db or "
                "sqlite:////absolute/path.db"
            )
        if "?" in rest:
            # SQLAlchemy's options as a query: taken for the file's name, a new, empty ledger
            # named 'afc.db?timeout=30' beside the real one paid again for what it held
            raise UsageError(
                f"ledger {text!r}: a SQLite URL takes no query (?...): write "
                f"sqlite://{rest.split('?', 1)[0]}"
            )
        return _on_disk(Path(rest[1:]), text)
    raise UsageError(
        f"ledger {text!r}: the {scheme}:// scheme is not supported; use a SQLite file "
        "(a plain path or sqlite:///path) or a PostgreSQL database (postgresql://...)"
    )


def _on_disk(path: Path, text: str) -> Path:
    """``path``, unless sqlite3 would open it as its in-memory database (``:memory:``, and
    ``./:memory:``, which a Path reads the same): a run there paid for its renders and
    recorded every attempt into memory that was gone when afc exited."""
    if str(path) == ":memory:":
        raise UsageError(
            f"ledger {text!r} is SQLite's in-memory database, gone when afc exits with every "
            "paid attempt it recorded: name a file (afc.db) or a PostgreSQL database"
        )
    return path


def precheck(path: Path) -> None:
    """For a ledger not created yet: refuse, without creating anything, a path under a regular
    file, in a folder that cannot be written, or in a folder that does not exist. afc does not
    create a ledger's folder, so that a mistyped --ledger or an unmounted volume in a cron
    line is not taken for a new, empty ledger (which would render, and pay for, every job
    whose output it cannot find, the ones cancelled in the real ledger too)."""
    for parent in [path.parent, *path.parent.parents]:
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                raise LedgerError(
                    f"cannot create the ledger {path}: {parent} is a file, not a folder"
                )
            if parent != path.parent:
                raise LedgerError(
                    f"cannot create the ledger {path}: the folder {path.parent} does not exist;"
                    " create it first (afc does not: a mistyped path or an unmounted volume "
                    "would otherwise start a new, empty ledger that pays again for every job "
                    "it cannot find stored)"
                )
            if not os.access(parent, os.W_OK | os.X_OK):
                raise LedgerError(
                    f"cannot create the ledger {path}: the folder {parent} is not writable"
                )
            return


def prepare_folder(path: Path) -> None:
    """Check the folder a new ledger is created in (``precheck``): afc does not create it."""
    precheck(path)


def refuse_special(path: Path) -> None:
    """Refuse a ledger path naming a FIFO, a device or a socket, before anything opens it:
    SQLite's open of a FIFO waits for a writer that never comes, and 'afc submit --ledger
    FIFO' hung there, deaf to SIGTERM (the signal handlers are set up after the ledger is
    open). A folder is refused where it is opened (``check_writable``)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return  # missing (a new ledger), or not for this check to say
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise LedgerError(
            f"the ledger {path} is not a regular file (a FIFO, a device or a socket); name a "
            "file: a SQLite ledger is a database file"
        )


def check_writable(path: Path) -> None:
    """afc writes its ledger on every command (and SQLite writes ``-wal`` and ``-shm`` files
    beside it): refuse a read-only one up front, with one line."""
    folder = path.parent if str(path.parent) else Path(".")
    refuse_special(path)
    if path.exists() and path.is_dir():
        raise LedgerError(f"the ledger {path} is a folder; name a file")
    if path.exists() and not os.access(path, os.W_OK):
        raise LedgerError(
            f"the ledger {path} is read-only (a read-only file or file system); afc records "
            "every run in it: make it writable, or copy it somewhere writable and point "
            f"--ledger there{_taken_with(path)}"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise LedgerError(
            f"the ledger's folder {folder} is not writable (SQLite keeps {path.name}-wal and "
            f"{path.name}-shm beside it); make it writable or move the ledger"
            f"{_taken_with(path)}"
        )


def _taken_with(path: Path) -> str:
    """What a copy or a move of the read-only ledger at ``path`` must take with it: its
    ``-wal`` file, which a run killed (SIGKILL, a power cut, the OOM killer) leaves holding
    the ledger's latest transactions, and the spool folder beside it, holding paid renders
    not yet stored. 'Copy it somewhere writable', done as ``cp afc.db``, gave a ledger
    without them: a killed run's whole batch (its admission, its attempts in flight, a
    Replicate request's id) was missing from the copy, and its resume paid for it again; the
    renders left in the spool were SPOOL_MISSING, paid again by a retry."""
    from afc_cli.spool import Spool

    wal = path.with_name(path.name + "-wal")
    spool = Spool.beside(path)
    taken = []
    with contextlib.suppress(OSError):
        if wal.stat().st_size:
            taken.append(f"{wal.name} (it holds the ledger's latest transactions)")
    with contextlib.suppress(OSError):  # a spool this user may not read: not said
        if spool.job_ids():
            taken.append(f"the folder {spool.root.name} (paid renders not yet stored)")
    if not taken:
        return ""
    return f"; take {' and '.join(taken)} with it, beside it under the same names"


def writable(path: Path) -> bool:
    """Whether afc may write the SQLite ledger at ``path`` (and beside it, its -wal and -shm
    files): ``check_writable`` refuses one that is not, unless only read."""
    folder = path.parent if str(path.parent) else Path(".")
    return os.access(path, os.W_OK) and os.access(folder, os.W_OK | os.X_OK)


def holds_something(path: Path) -> bool:
    """Whether ``path`` exists and is more than an empty database (a 0-byte file, or one a
    submit interrupted before its schema left): a reading command finds no ledger in an empty
    one, and a submit starts its ledger there as in a missing file. Reads only."""
    refuse_special(path)
    if not path.exists():
        return False
    if path.is_file() and path.stat().st_size == 0:
        return False
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            marks = conn.execute(
                "SELECT (SELECT COUNT(*) FROM sqlite_master), application_id, user_version"
                " FROM pragma_application_id, pragma_user_version"
            ).fetchone()
            return any(marks)  # a table, or another application's stamp
        finally:
            conn.close()
    except (sqlite3.Error, OSError, ValueError):
        return True  # not a database afc can read: opening it says what it is


def identity(conn: sqlite3.Connection, path: Path) -> str:
    """``"new"`` for an empty database, ``"afc"`` for an afc ledger this version can use;
    raises LedgerError for another application's file or a newer afc's ledger. Reads only."""
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = {
        row[0]
        for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        if not row[0].startswith("sqlite_")
    }
    if app_id not in (0, APPLICATION_ID):
        raise LedgerError(
            f"{path} is another application's SQLite database (application_id "
            f"{app_id:#x}), not an afc ledger; afc left it untouched: point --ledger at "
            "another file"
        )
    applied: list[str] = []
    if "_sqlite_migrations" in tables:
        applied = [
            row[0]
            for row in conn.execute(
                "SELECT name FROM _sqlite_migrations WHERE migration_set = ? ORDER BY rowid",
                (MIGRATION_SET,),
            )
        ]
    if app_id == 0 and not applied:
        if tables:
            raise LedgerError(
                f"{path} is a SQLite database with other tables ({', '.join(sorted(tables)[:5])}"
                f"{', ...' if len(tables) > 5 else ''}), not an afc ledger; afc left it "
                "untouched: point --ledger at another file"
            )
        return "new"
    known = known_migrations()
    unknown = [name for name in applied if name not in known]
    if unknown or version > len(known):
        newer = max(version, len(applied))
        if newer <= len(known):
            raise LedgerError(another_build(path, unknown, newer, len(known)))
        raise LedgerError(
            f"the ledger {path} has schema version {newer}, newer than this afc's "
            f"({len(known)}; it does not know {', '.join(unknown) or 'the newer migrations'}); "
            "afc left it untouched: upgrade afc to use it"
        )
    return "afc"


def another_build(path: object, unknown: list[str], version: int, known: int) -> str:
    """Why a ledger whose migrations include some this afc does not have, though it has no
    more of them than this afc (``version`` against ``known``), is refused: another build of
    afc migrated it (a development or branch build whose migration was named otherwise when
    released, or afc's first build, whose m002 was renamed). It was called 'newer than this
    afc' ('schema version 2, newer than this afc's (14)'), and told to upgrade afc, which
    would never know those migrations either."""
    return (
        f"the ledger {path} was migrated by another build of afc: it has migrations this afc "
        f"does not have ({', '.join(unknown)}), at schema version {version} (this afc's: "
        f"{known}), so it is not a newer afc's (a development or branch build's, whose "
        "migrations were named otherwise when released). afc left it untouched: use it with "
        "the build that migrated it, or restore it from a backup made before that build ran"
    )


def leases_sql(done: set[str]) -> str:
    """The query ``check_no_live_runs`` takes its rows from, on a ledger whose applied
    migrations are ``done`` (``lease_mono`` exists from m009 on)."""
    mono = "lease_mono" if "m009_lease_mono" in done else "NULL"
    return f"SELECT lease_owner, lease_expires, {mono} FROM jobs WHERE lease_owner IS NOT NULL"


def check_no_live_runs(path: object, rows: list[tuple], now: float, pending: list[str]) -> None:
    """Refuse to migrate a ledger while a live process holds a job's lease (``rows``: each
    job's ``(lease_owner, lease_expires, lease_mono)``, ``now`` by the ledger's clock).

    That process is most likely an older afc (one of this version would have migrated the
    ledger itself when it opened it): its code knows the schema it started on, not this one.
    On PostgreSQL its prepared statements fail once a table they read changes ("cached plan
    must not change result type"), so it stops in the middle of its jobs, renders it paid for
    and had not spooled yet lost, and the next run pays for them again; on either engine it
    writes rows without the columns it does not know. So a migration waits for those runs to
    end (SIGTERM drains a worker; a dead process's lease runs out), and says so, exit 2, with
    nothing written. A lease held for a host's spool (``host:0:0``) has no process, nor has
    ``MOVED_OWNER``'s, held for good on a ledger ``afc ledger copy`` moved (a live run for
    ``lease_held``, which keeps every claim off those jobs, but no process to wait for)."""
    from afc_cli.owner import held_by_no_process, lease_held

    live = sorted(
        {
            owner
            for owner, expires, mono in rows
            if not held_by_no_process(owner) and lease_held(owner, expires, now, mono)
        }
    )
    if not live:
        return
    held = sum(1 for owner, _, _ in rows if owner in live)  # jobs, for the message
    until = max(expires or 0 for owner, expires, _ in rows if owner in live)
    stamp_at = time.strftime("%H:%M:%S UTC", time.gmtime(until))
    raise LedgerError(
        f"the ledger {path} needs migrations this afc brings ({', '.join(pending)}), and "
        f"{held} job(s) are leased by {len(live)} running afc process(es) "
        f"({', '.join(live[:3])}{', ...' if len(live) > 3 else ''}), most likely an older afc "
        "that cannot run on the new schema: migrating now would stop them in the middle of "
        "paid calls. afc left the ledger untouched: stop those processes first (SIGTERM "
        "drains a worker, its calls in flight finished and recorded), or wait for their leases "
        f"to run out if they are gone (by {stamp_at}), then start this afc again"
    )


def say_migrated(path: object, applied_before: int, pending: list[str]) -> None:
    """Tell the person at the command that this afc migrated an existing ledger (not a new
    one), in one line on stderr (``streams.say``): it was done in silence, by any command that
    opens the ledger (an 'afc status' from a laptop with a newer afc), and the older afc of
    every other host and cron line that uses it then refused it ("newer than this afc") or
    stopped on it, with no word to the person who had upgraded it."""
    if not applied_before or not pending:
        return
    from afc_cli import streams

    streams.say(
        f"the ledger {path} was brought up to this afc's schema (version "
        f"{applied_before + len(pending)}, from {applied_before}: {', '.join(pending)}), "
        "in one transaction: upgrade afc on every host and cron line that uses it, as an "
        "older afc must not run on it (this one's workers stop, exit 2, at their next claim)"
    )


def known_migrations() -> list[str]:
    """The names of every migration this version of afc has, in order."""
    from afc_cli.migrations import names

    return names()


def applied_names(conn: sqlite3.Connection) -> set[str]:
    """The names of afc's migrations applied to a SQLite ledger (none for a new file)."""
    has_table = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_sqlite_migrations'"
    ).fetchone()
    if not has_table:
        return set()
    return {
        row[0]
        for row in conn.execute(
            "SELECT name FROM _sqlite_migrations WHERE migration_set = ?", (MIGRATION_SET,)
        )
    }


def pending(conn: sqlite3.Connection) -> bool:
    """Whether a migration of this afc is not applied to the ledger yet (what sqlite-utils'
    ``Migrations.pending`` answers, read without importing it)."""
    applied = applied_names(conn)
    return any(name not in applied for name in known_migrations())


def stamp(conn: sqlite3.Connection) -> None:
    """Mark the database as an afc ledger at the schema version now applied (inside the
    migration transaction)."""
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version = {len(known_migrations())}")


def stamped(conn: sqlite3.Connection) -> bool:
    row = conn.execute("PRAGMA application_id").fetchone()
    return row[0] == APPLICATION_ID


def check_pages(conn: sqlite3.Connection, path: Path) -> None:
    """Before a run writes, read every page once (``PRAGMA quick_check``): a ledger with
    damaged pages is refused with exit 2 instead of failing in the middle of a paid run."""
    rows = [row[0] for row in conn.execute("PRAGMA quick_check(5)")]
    if rows != ["ok"]:
        found = "; ".join(
            " ".join(str(row).split()) for row in rows
        )  # one line: a row may hold several
        raise LedgerError(
            f"the ledger {path} is damaged ({found}); afc left it as it is: restore "
            f"it from a backup, or recover it with 'sqlite3 {path} .recover'"
        )


def sqlite_temp_folder() -> str | None:
    """The folder where SQLite makes its temporary files (a big sort's spill): the first
    writable of SQLITE_TMPDIR, TMPDIR, /var/tmp, /usr/tmp, /tmp and the working directory (its
    unix VFS's list), or None where none is."""
    for folder in (
        os.environ.get("SQLITE_TMPDIR"),
        os.environ.get("TMPDIR"),
        "/var/tmp",
        "/usr/tmp",
        "/tmp",
        ".",
    ):
        if folder and os.path.isdir(folder) and os.access(folder, os.W_OK | os.X_OK):
            return folder
    return None


# File systems that share a folder between machines, on which SQLite's locks cannot be relied
# on (SQLite's documentation: a WAL database's processes must be on one host; "WAL does not
# work over a network filesystem"): /proc/self/mounts' names for them
NETWORK_FS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "9p",
        "afs",
        "ceph",
        "glusterfs",
        "fuse.glusterfs",
        "fuse.sshfs",
        "lustre",
        "gpfs",
        "beegfs",
    }
)


def network_file_system(path: Path, mounts: str = "/proc/self/mounts") -> str | None:
    """The network file system (``NETWORK_FS``) the SQLite ledger at ``path`` is on, or None
    (a local disk, or no mount table to read: not Linux)."""
    target = os.path.realpath(path if path.exists() else path.parent)
    found, longest = None, -1
    try:
        with open(mounts, encoding="utf-8", errors="replace") as table:
            for line in table:
                fields = line.split()
                if len(fields) < 3:
                    continue
                # spaces, tabs and backslashes in a mount point are written as octal escapes
                point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1])
                inside = target == point or target.startswith(point.rstrip("/") + "/")
                if inside and len(point) > longest:
                    found, longest = fields[2], len(point)
    except OSError:
        return None
    return found if found in NETWORK_FS else None


def _no_room(path: Path) -> bool:
    """Whether the disk of the ledger's folder is full: SQLite says 'disk I/O error', not
    'disk is full', when it cannot make the ledger's -wal or -shm file there."""
    try:
        found = os.statvfs(path.absolute().parent)
    except OSError:
        return False
    return found.f_bavail * found.f_frsize < 64 * 1024


def damaged(path: Path, exc: sqlite3.DatabaseError) -> LedgerError:
    """A ledger SQLite cannot read: one line naming the file and what to do."""
    text = str(exc)
    if "readonly" in text or "read-only" in text:
        return LedgerError(
            f"the ledger {path} is read-only ({text}); make it and its folder writable"
        )
    if "unable to open" in text:
        return LedgerError(f"cannot open the ledger {path} ({text}): check the path and folder")
    if "locked" in text or "busy" in text:
        # another process held the write lock past the busy timeout (a migration waits for
        # it): nothing is wrong with the file
        return LedgerError(
            f"the ledger {path} is locked ({text}): another process held its write lock too "
            "long (a sqlite3 shell or a script in an open transaction?); afc left it as it was "
            "(nothing was written): end it, then run this again"
        )
    if "disk is full" in text or ("disk I/O error" in text and _no_room(path)):
        # made or migrated on a full disk: its transaction rolled back, the file is whole (told
        # to restore a backup, a person would lose what the ledger holds since)
        return LedgerError(
            f"cannot write to the ledger {path} ({text}): its disk is full; afc left it as it "
            "was (nothing was written): free space on that disk, then run this again"
        )
    return LedgerError(
        f"the ledger {path} is damaged or not a SQLite database ({text}); afc left it as it "
        f"is: restore it from a backup, or recover it with 'sqlite3 {path} .recover'"
    )
