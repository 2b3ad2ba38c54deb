"""``afc ledger copy SRC DST``: move a ledger between backends (SQLite to PostgreSQL, or back),
history included: batches, jobs and their needs, steps, attempts, events, avoided renders,
review decisions, webhook deliveries and disabled endpoints, every row with its id.

- The source is read in one snapshot (SQLite: under its write lock; PostgreSQL: a REPEATABLE
  READ transaction), so a copy never holds half of a change.
- A SQLite source with damaged pages is refused before anything is written (``check=True``:
  ``PRAGMA quick_check``, as before a run), not stopped part-way through its read.
- The destination must hold no batch yet (a new file, an empty database, or a ledger just
  created); everything is written in one transaction there, so a copy that fails leaves it as
  it was. Its schema is brought to this afc's first (the same migrations).
- A source with a live lease (a run or worker is using it) is refused: stop it, then copy. So
  is one with an attempt in a call of a live process of this host (a cancelled job's: the
  cancel ended its lease, and that run records the call's answer and cost when it comes), or
  of another host, for as long as 'afc retry' would wait for that call (``ops._in_flight``).
  Leases of dead or expired owners are copied as they are; the next run takes them over as it
  would have in the source.
- A copy moves the work: the source is marked moved (``ledger_moves``) in the transaction
  that read it, once the destination committed, and its unfinished jobs are leased to
  ``MOVED_OWNER`` for good; from then on submit, resume and worker refuse it (exit 2,
  ``Ledger.refuse_moved``) and no claim takes its jobs (PostgreSQL: the copy holds the jobs
  table against claims until then), while every reading command still reads its history.
  Its deliveries are neither claimed nor held for a POST any more (``Ledger._NOT_MOVED``): a
  drain still going on the source posts nothing after the POST it had in flight, and the
  destination posts what it had claimed once the leases copied with them run out.
  A cron line or a worker left on the source would otherwise pay for the jobs the
  destination's runs pay for. Until the source is marked, the copy runs nothing either
  (``_mark_unfinished``): killed between the two commits, a copy left both ledgers running;
  the same copy again copies the source anew, or opens the copy (``_finish_move``), a
  SQLite file named by any path to it, a database by its URL with or without a password
  (``_names``).
  ``keep_source`` (``--keep-source``: a backup, a test copy)
  leaves the source as it was, both ledgers able to run the same jobs.
- The texts the ledger scrubs where they enter (``SCRUBBED``: error messages, event details,
  usage, review notes, delivery errors, and the envelopes that carry a job's error message
  and review note) are scrubbed again on their way, with the secrets of
  the environment the copy runs in (``secrets.scrub``): an older afc, scrubbing less, kept
  some a provider quoted back, and a move to PostgreSQL put them in a database many people
  read. What drives work is copied as it is: a job's request (its hash makes a replay one),
  its webhook, a provider's request id (a later run polls it); a delivery's envelope holding
  no secret is kept byte for byte.
- Spooled bytes are files, not rows: a SQLite ledger's are in ``afc.db-spool`` beside it, a
  PostgreSQL ledger's in ``AFC_SPOOL_DIR``, else ``afc-spool`` in the working folder
  (afc_cli/ledger/postgres.py), beside the ids of requests a provider still renders that the
  ledger could not record (``<job id>.request``, afc_cli/spool.py). The copy reports how many
  such files wait in the source's spool on this host and the folder the destination's runs here read (``destination_spool``: beside a
  SQLite destination, whatever ``AFC_SPOOL_DIR`` says), so they can be moved there before the
  next run adopts them instead of paying for those renders again.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from afc_cli.costs import plural
from afc_cli.errors import LedgerError, LedgerWriteError, UsageError, first_line, unwritten
from afc_cli.ledger.core import (
    COPY_UNFINISHED,
    MOVED_UNTIL,
    TERMINAL,
    TERMINAL_SQL,
    Ledger,
    _crash_point,
    _dumps,
    unfinished_copy_source,
)
from afc_cli.owner import (
    MOVED_OWNER,
    held_by_no_process,
    lease_held,
    owner_is_dead,
    sees_process,
)
from afc_cli.secrets import REDACTED, scrub, scrub_data

# every table of the schema but the migrations' own bookkeeping, parents before children
# (foreign keys); tests/test_ledger_copy.py checks that none is left out
TABLES = (
    "batches",
    "jobs",
    "job_needs",
    "steps",
    "attempts",
    "events",
    "avoided",
    "reviews",
    "deliveries",
    "endpoints",
)
# the source's own record of where its work was moved (m010): never the destination's
NOT_COPIED = ("ledger_moves",)
# sums the destination's triggers keep as the copied rows arrive (m019's run_spend)
DERIVED = ("run_spend",)
# tables whose integer ids a PostgreSQL destination continues after the copied ones
IDENTITY_TABLES = ("attempts", "events", "avoided", "reviews")
CHUNK = 1000
# the columns of outside text the ledger scrubs where it enters, scrubbed again by the copy
# (True: a JSON document, scrubbed string by string so it stays one)
SCRUBBED = {
    "jobs": {"error_message": False},
    "attempts": {"error_message": False, "usage_json": True},
    "events": {"detail_json": True},
    "reviews": {"note": False},
    # an envelope carries the job's error message and a review note, as they were scrubbed
    # then: an older afc's held the key its job's message did (every later try sends the
    # scrubbed body, signed afresh as each try is)
    "deliveries": {"last_error": False, "envelope": True},
    "endpoints": {"reason": False},
}


def copy_ledger(src_url: str, dst_url: str, *, keep_source: bool = False) -> dict[str, Any]:
    if str(src_url) == str(dst_url):
        raise UsageError("afc ledger copy needs two different ledgers")
    src = Ledger(src_url, create=False, check=True)  # damaged pages: refused before the copy
    try:
        finished = _finish_move(src, dst_url) if not keep_source else None
        if finished is not None:
            return finished
        _refuse_moved(src)
        _refuse_live(src)  # before the destination is created or migrated
        dst = Ledger(dst_url)
        try:
            if _one_ledger(src, dst):
                raise UsageError(
                    f"afc ledger copy needs two different ledgers: {src.path} and {dst.path} "
                    "are one ledger named two ways (nothing was written)"
                )
            anew = not keep_source and _names(_unfinished_copy_of(dst), src)
            if dst.batches() and not anew:
                raise UsageError(
                    f"the destination {dst.path} already holds batches; copy into a new or "
                    "empty ledger (nothing was written)"
                )
            counts: dict[str, int] = {}
            copied = False
            at = src  # the ledger a failure of the copy's transactions is in
            try:
                with src.tx():
                    src.snapshot()
                    src.lock_jobs()  # no claim commits in the source until it is marked moved
                    _refuse_moved(src)  # again: a copy of it beside this one may have moved it
                    _refuse_live(src)  # again, in the snapshot the copy reads
                    at = dst
                    with dst.tx():
                        if anew:
                            # an unfinished copy of this source (it ran nothing: it refused
                            # every run and change), copied again from the source as it is now
                            for table in (*DERIVED, *reversed(TABLES), *NOT_COPIED):
                                dst.db.execute(f"DELETE FROM {table}")
                        dst.before_copy()
                        for table in TABLES:
                            counts[table] = _copy_table(src, dst, table)
                        dst.after_copy()
                        if not keep_source:
                            # the copy runs nothing until the source is marked moved (below)
                            _mark_unfinished(src, dst)
                    copied = True
                    _crash_point("copy_committed")  # crash tests: the source not marked yet
                    if not keep_source:
                        _mark_moved(src, dst)
            except BaseException as exc:  # a signal too (SIGTERM is a KeyboardInterrupt here)
                if not copied or keep_source:
                    failed = _not_copied(exc, src, dst, at) if not copied else None
                    if failed is None:
                        raise
                    raise failed from None
                # the destination holds the copy, which runs nothing (``_mark_unfinished``);
                # the source, unmarked, still runs
                raise LedgerError(
                    f"{src.path} was copied into {dst.path}, but could not be marked moved "
                    f"({first_line(exc) or 'interrupted'}): {src.path} still runs its jobs, and "
                    f"the copy runs nothing until it is, so no job is paid for in both; run "
                    f"'afc ledger copy {src.path} {dst.path}' again once {src.path} can be "
                    "written (it copies the source anew)"
                ) from None
            if not keep_source:
                _crash_point("copy_marked")  # crash tests: the copy not opened to runs yet
                _open_copy(dst)
                _hand_over_spool(src, dst)
            spooled = _spooled(src, dst)
        finally:
            dst.close()
    finally:
        src.close()
    return {
        "source": str(src.path),
        "destination": str(dst.path),
        "rows": counts,
        # the source now runs and changes nothing (Ledger.refuse_moved), unless kept
        "source_moved": not keep_source,
        **spooled,
    }


def _not_copied(
    exc: BaseException, src: Ledger, dst: Ledger, at: Ledger
) -> LedgerWriteError | None:
    """A ledger that could not be written or read before the copy committed (a full disk, a
    lost PostgreSQL connection): nothing was copied, the destination's transaction rolled
    back and the source left as it was. Said so, with the fix and to copy again, not in a
    run's words ('every job stays resumable ... run afc resume', which runs the jobs on the
    source). None: not such a failure (a refusal, a signal, a bug) - raised as it is."""
    written = unwritten(exc, at.path)
    if written is None:
        return None
    return LedgerWriteError(
        f"{written.failed}. Nothing was copied: {dst.path} holds none of it and {src.path} is "
        f"as it was (not moved); {written.fix}, then copy again"
    )


def ledger_name(ledger: Ledger) -> str:
    """A ledger as the move records name it (never a password): a file's absolute path."""
    return str(ledger.path if not isinstance(ledger.path, Path) else ledger.path.absolute())


def _names(name: str | None, ledger: Ledger) -> bool:
    """Whether a move record's ``name`` (``ledger_name``) is ``ledger``: the same text, or,
    for a file, the same file reached by another path (a folder through a symbolic link, as
    a shared mount often is), and for a PostgreSQL database its URL with or without a
    password in it (one run given it, another reading PGPASSWORD). By text alone, a copy
    killed between its commits and named again by the path or URL its refusal gives (the
    run's spelling) was refused as moved elsewhere, and the copy stayed shut to every run."""
    if name is None:
        return False
    if name == ledger_name(ledger):
        return True
    if not isinstance(ledger.path, Path):
        # a database URL as messages show it (``postgres.display_url``): a URL with a
        # password shows neither it nor the user name (``<redacted>@``), one without shows
        # the user: the same database, given with its password or without. Two shown users
        # stay two (their schemas, and so their ledgers, may differ)
        shown = str(ledger.path)
        masked = f"{REDACTED}@"
        return (masked in name or masked in shown) and _place(name) == _place(shown)
    if "://" in name:
        return False
    try:
        return os.path.samefile(name, ledger.path)
    except OSError:
        return False


def _one_ledger(src: Ledger, dst: Ledger) -> bool:
    """Whether two open ledgers are one, named two ways: a file by two paths (``./afc.db``,
    a symbolic link), a database by two URLs (``localhost`` and ``127.0.0.1``, a port given
    or not). Its text compared alone, a file's copy onto itself waited for its own write
    lock and failed after the busy timeout saying another process held it, and a database
    with no batch yet was marked moved to itself, shut to every run. A database is known by
    ``spool_identity`` (its oid and when afc's schema was applied to it)."""
    if isinstance(src.path, Path) and isinstance(dst.path, Path):
        try:
            return os.path.samefile(src.path, dst.path)
        except OSError:
            return False
    mine = src.spool_identity()
    return mine is not None and mine == dst.spool_identity()


def _place(url: str) -> str:
    """A database URL without its user name and password (``user:password@``)."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@", r"\1", url)


def _mark_unfinished(src: Ledger, dst: Ledger) -> None:
    """In the destination's transaction: the copy runs nothing (its own ``ledger_moves``
    row, ``COPY_UNFINISHED``) until the source is marked moved and ``_open_copy`` removes
    the row. A copy killed between the two commits left a whole copy beside an unmarked
    source, both able to run (and pay for) the same jobs."""
    dst.db.execute(
        "INSERT INTO ledger_moves (destination, moved_at) VALUES (?, ?)",
        (COPY_UNFINISHED + ledger_name(src), time.time()),
    )


def _open_copy(dst: Ledger) -> None:
    """Once the source is marked moved: the copy runs (``_mark_unfinished``'s row removed)."""
    with dst.tx():
        dst.db.execute(
            "DELETE FROM ledger_moves WHERE destination LIKE ?", (COPY_UNFINISHED + "%",)
        )


def _unfinished_copy_of(dst: Ledger) -> str | None:
    """The source's name of an unfinished copy (``_mark_unfinished``), or None."""
    moved = dst.moved_to()
    return None if moved is None else unfinished_copy_source(moved["destination"])


def _finish_move(src: Ledger, dst_url: str) -> dict[str, Any] | None:
    """A copy killed after the source was marked moved to ``dst_url``, before the copy was
    opened to runs (both then refused every run): the copy is opened, and the result is the
    move's. None when that is not the case (the copy goes on, or refuses, as before)."""
    moved = src.moved_to()
    if moved is None:
        return None
    try:
        dst = Ledger(dst_url, create=False)
    except Exception:  # noqa: BLE001 - no such ledger: the source's refusal says where it went
        return None
    try:
        if not _names(moved["destination"], dst) or not _names(_unfinished_copy_of(dst), src):
            return None
        _open_copy(dst)
        _hand_over_spool(src, dst)
        return {
            "source": str(src.path),
            "destination": str(dst.path),
            "rows": {table: _count(dst, table) for table in TABLES},
            "source_moved": True,
            **_spooled(src, dst),
        }
    finally:
        dst.close()


def _count(ledger: Ledger, table: str) -> int:
    return ledger._one(f"SELECT COUNT(*) AS n FROM {table}")["n"]


def _refuse_moved(src: Ledger) -> None:
    moved = src.moved_to()
    if moved is not None:
        raise UsageError(
            f"the ledger {src.path} was moved to {moved['destination']} already: copy from "
            "there (nothing was written)"
        )


def _mark_moved(src: Ledger, dst: Ledger) -> None:
    """In the source's transaction, once the destination committed: the move recorded
    (``Ledger.refuse_moved`` reads it) and every unfinished job leased to ``MOVED_OWNER`` for
    good. A worker idle on the source at the copy (it held no lease, so nothing refused the
    copy) claims none of them: one already waiting on the copy's lock re-reads each row it
    would take and finds it held; one that comes later is refused at its round. Otherwise a
    cron line or a worker left on the source would pay for jobs the destination pays for."""
    src.db.execute(
        "INSERT INTO ledger_moves (destination, moved_at) VALUES (?, ?)",
        (ledger_name(dst), time.time()),
    )
    src.db.execute(
        "UPDATE jobs SET lease_owner = ?, lease_expires = ?, lease_mono = NULL"
        f" WHERE status NOT IN {TERMINAL_SQL}",
        (MOVED_OWNER, MOVED_UNTIL),
    )


def _refuse_live(src: Ledger) -> None:
    """A source with a job held by a live run (its lease not expired, its owner not known
    dead) is refused: the copy would miss what that run is about to record. A job leased to
    a host rather than a run (waiting for storage, its output in that host's spool:
    ``owner.host_lease``) has no run writing it and is copied with its lease
    (``owner.held_by_no_process``).

    Held as a claim decides (``owner.lease_held``): a live run of this host holds its jobs by
    the monotonic clock, so a wall clock stepped past its leases does not let the copy go on
    beside it."""
    now = src.lease_clock()
    live = [
        row
        for row in src._all(
            "SELECT key, batch, lease_owner, lease_expires, lease_mono FROM jobs"
            f" WHERE lease_owner IS NOT NULL AND status NOT IN {TERMINAL_SQL}",
        )
        if not held_by_no_process(row["lease_owner"])
        and lease_held(row["lease_owner"], row["lease_expires"], now, row["lease_mono"])
    ]
    if live:
        row = live[0]
        raise UsageError(
            f"{plural(len(live), 'job')} of {src.path} {'is' if len(live) == 1 else 'are'} "
            "held by a live run (e.g. "
            f"{row['batch']}/{row['key']}, by {row['lease_owner']}); stop it (or "
            "let its leases expire), then copy (nothing was written)"
        )
    # A cancel ends the job's lease and leaves its call to the live run, which records the
    # answer and its cost when it comes (``Ledger.cancel``): a call of a live process of this
    # host holds the source as a lease does; so does another host's call of an ended job,
    # whose process cannot be looked at from here, for as long as 'afc retry' takes it to be
    # in flight (``ops._in_flight``): copied on, its attempt stayed 'started', unpriced, and
    # its run wrote the answer and cost into the source after the move.
    from afc_cli.ops import _call_lasts, _in_flight, over_at

    now = src.clock()  # the clock attempts' starts are stamped on
    calls = [
        row
        for row in src._all(
            "SELECT j.key, j.batch, j.status AS job_status, j.request_json, a.owner,"
            " a.status, a.started_at, a.chain_index"
            " FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE a.status = 'started'"
        )
        if (sees_process(row["owner"]) and not owner_is_dead(row["owner"]))
        or (row["job_status"] in TERMINAL and _in_flight(row, now, _call_lasts(row, row)))
    ]
    if calls:
        row = calls[0]
        raise UsageError(
            f"{plural(len(calls), 'attempt')} of {src.path} {'is' if len(calls) == 1 else 'are'}"
            " in a call of a live run (e.g. "
            f"{row['batch']}/{row['key']}, by {row['owner']}); let it end, then copy (nothing "
            f"was written){over_at(row, _call_lasts(row, row))}"
        )


def _copy_table(src: Ledger, dst: Ledger, table: str) -> int:
    columns = dst.columns(table)
    wanted = [c for c in src.columns(table) if c in columns]
    names = ", ".join(wanted)
    marks = ", ".join("?" * len(wanted))
    scrubbed = [
        (at, SCRUBBED[table][name])
        for at, name in enumerate(wanted)
        if name in SCRUBBED.get(table, {})
    ]
    copied = 0
    for rows in src.chunks(f"SELECT {names} FROM {table}", CHUNK):
        if scrubbed:
            seen: dict[str, str] = {}  # a chunk's texts recur (``scrub_data``); no more held
            rows = [_scrubbed(row, scrubbed, seen) for row in rows]
        dst.db.conn.executemany(f"INSERT INTO {table} ({names}) VALUES ({marks})", rows)
        copied += len(rows)
    return copied


def _scrubbed(row: Any, columns: list[tuple[int, bool]], seen: dict[str, str]) -> Any:
    """``row`` with the texts at ``columns`` scrubbed (``SCRUBBED``); a JSON document that
    holds no secret is kept as it was written, and one that is not JSON as a text."""
    values = list(row)
    for at, is_json in columns:
        text = values[at]
        if not isinstance(text, str) or not text:
            continue
        done = seen.get(text)
        if done is None:
            done = seen[text] = scrub(text)
        if done == text:
            continue  # no secret in it, decoded or not: kept as written
        if is_json:
            try:
                data = json.loads(text)
            except ValueError:
                data = None
            else:
                clean = scrub_data(data, seen)
                if clean != data:
                    values[at] = _dumps(clean)
                continue
        values[at] = done
    return values


def _hand_over_spool(src: Ledger, dst: Ledger) -> None:
    """A moved source's spool, when the destination's runs here read the same folder (two
    PostgreSQL ledgers, ``AFC_SPOOL_DIR`` or ``./afc-spool``), becomes the destination's: its
    files are the destination's jobs' now, and the mark that refuses another ledger's runs
    there (``run.own_spool``) names the destination."""
    from afc_cli.spool import Spool

    src_id, dst_id = src.spool_identity(), dst.spool_identity()
    if src_id is None or dst_id is None:
        return
    spool = Spool(src.spool_root())
    if Spool(dst.spool_root()).root != spool.root:
        return
    found = spool.owner()
    if found is not None and found.get("ledger") == src_id:
        spool.mark(dst_id, str(dst.path), replace=True)


def _spooled(src: Ledger, dst: Ledger) -> dict[str, Any]:
    root = src.spool_root().absolute()
    # paid renders' bytes, and the ids of job-style requests (Replicate, fal) the ledger could
    # not record (``Spool.note_request``): without either, the next run pays again
    files = [
        path
        for path in (root.iterdir() if root.is_dir() else ())
        if path.name.endswith((".spool", ".request"))
    ]
    return {
        "spool": str(root),
        "spooled_files": len(files),
        "destination_spool": str(dst.spool_root().absolute()),
    }
