"""The ledger: the truth about jobs and money, in SQLite through sqlite-utils.

Every state change is one transaction (``Ledger.tx``), and a step's checkpoint is written in the
same transaction as its effect. Writes use SQL that PostgreSQL also runs (``INSERT ... ON
CONFLICT``, conditional ``UPDATE ... WHERE status``) so the ledger can move behind another
engine without touching the pipeline.

Durability: the ledger runs in WAL mode with ``synchronous=NORMAL``, which survives any process
crash (SIGKILL included) with every committed transaction intact. The one write whose loss on a
power cut would cost money unrecorded, the attempt row committed before a paid provider call,
is synced to disk before the call: alone with ``synchronous=FULL`` (``tx(durable=True)``), or,
in a run loop, in the shared commit that the jobs starting together await, which then also
syncs the WAL file (``tx(sync_on_commit=True)``): what FULL does, once for all of them.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlite_utils import Database

from afc_cli import ledger_file
from afc_cli.conflicts import changes_since
from afc_cli.errors import LedgerError, UsageError, ledger_write_error
from afc_cli.migrations import migrations
from afc_cli.owner import current_owner, owner_is_dead
from afc_cli.secrets import scrub, scrub_data

TERMINAL = ("succeeded", "failed", "cancelled", "dead")
ADMIT_CHUNK = 5000  # jobs admitted per round of statements (one transaction for them all)
ADMIT_CACHE_KIB = -128 * 1024  # SQLite's page cache during an admission (negative: KiB)
ACTIVE = ("queued", "running", "waiting")
BUSY_TIMEOUT_S = 30.0
# A backstop for runs that keep dying outside provider calls (which cost nothing but never
# finish the job): dead-lettered after this many takeovers. Runs dying *during* calls are
# bounded much sooner, by AFC_MAX_INTERRUPTS (pipeline.py), since each may have been paid.
MAX_TAKEOVERS = 20
INTERRUPTED_MESSAGE = (
    "the process running this attempt ended before it reported; the provider may have charged "
    "for it"
)
# Under group commit, changes wait at most this long for their commit (and other afc
# processes at most this long for the write lock). Nothing that money depends on waits:
# attempt rows and failed attempts' outcomes commit at once; a success commits with its spool
# checkpoint (a crash before that commit adopts the spool file: nothing is paid twice).
GROUP_COMMIT_S = 0.005


def _now() -> float:
    return time.time()


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, separators=(",", ":"))


def _in(values: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


TERMINAL_SQL = _in(TERMINAL)
# A job's cost by the one rule (afc_cli/costs.py job_cost): the sum of its known attempt costs,
# and how many attempts are unpriced; ``j`` is the jobs table.
JOB_COST_SQL = (
    "(SELECT SUM(a.cost_micros) FROM attempts a WHERE a.job_id = j.id) AS cost_micros,"
    " (SELECT COUNT(*) FROM attempts a WHERE a.job_id = j.id AND a.cost_micros IS NULL)"
    " AS unpriced_attempts"
)
ACTIVE_SQL = _in(ACTIVE)


class BudgetExhausted(Exception):
    """The next attempt's estimate does not fit the run's budget; nothing was started."""

    def __init__(self, spent: int, cap: int, estimate: int):
        super().__init__(f"spent {spent} of {cap} micro-USD; next attempt needs {estimate}")
        self.spent = spent
        self.cap = cap
        self.estimate = estimate


class JobLost(Exception):
    """The job stopped being ours (it ended elsewhere, e.g. cancelled, or its lease was taken):
    the worker stops quietly and the transaction that noticed writes nothing."""


@dataclass
class AdmitResult:
    batch: str
    storage: str
    new: list[str] = field(default_factory=list)
    replayed: list[str] = field(default_factory=list)
    # each {"key", "stored_hash", "new_hash", "changes": [{"field", "old", "new"}]}
    conflicts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def admitted_keys(self) -> list[str]:
        return self.new + self.replayed


def _job_id(job: Any) -> str:
    return job.job_id


def _chunks(items: Any, size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class Ledger:
    def __init__(self, path: str | Path, *, create: bool = True, check: bool = False):
        self.path = ledger_file.ledger_path(path)
        if not create and not self.path.exists():
            raise LedgerError(f"no ledger at {self.path} (run 'afc submit MANIFEST' first)")
        if create:
            ledger_file.prepare_folder(self.path)
        ledger_file.check_writable(self.path)
        try:
            conn = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_S)
        except sqlite3.DatabaseError as exc:
            raise ledger_file.damaged(self.path, exc) from None
        try:
            # whose file this is, before anything (even WAL mode) is written to it
            found = ledger_file.identity(conn, self.path)
            if found == "afc" and check:
                ledger_file.check_pages(conn, self.path)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            self.db = Database(conn, execute_plugins=False)
            self.owner = current_owner()
            self._depth = 0
            self._loop: Any = None
            self._flush_scheduled = False
            self._waiters: list[Any] = []  # futures of ``committed`` callers
            self._broken = False
            self._broken_by: BaseException | None = None  # why: for the run's message
            self._sync_pending = False  # the shared transaction holds a row to sync at commit
            if migrations.pending(self.db) or found == "new" or not ledger_file.stamped(conn):
                # Under the write lock, so two runs opening a new ledger at once (overlapping
                # cron jobs) apply each migration once; the loser finds nothing pending.
                with self.tx():
                    ledger_file.identity(conn, self.path)  # again, now under the lock
                    migrations.apply(self.db)
                    ledger_file.stamp(conn)
        except LedgerError:
            conn.close()
            raise
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise ledger_file.damaged(self.path, exc) from None

    def close(self) -> None:
        self.db.close()

    # --- transactions ---------------------------------------------------------------------

    @contextmanager
    def tx(
        self, *, durable: bool = False, commit: bool = False, sync_on_commit: bool = False
    ) -> Iterator[Database]:
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
            conn.execute("BEGIN IMMEDIATE")
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
        """Commit the shared transaction, if one is open and no block is running."""
        self._flush_scheduled = False
        waiters, self._waiters = self._waiters, []
        try:
            if self._depth == 0 and self.db.conn.in_transaction:
                self.db.conn.execute("COMMIT")
                if self._sync_pending:
                    self._sync_pending = False
                    self._sync_wal()
        except BaseException as exc:
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(ledger_write_error(self.path, exc))
            raise
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

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
        if self._loop is None or not self.db.conn.in_transaction:
            return
        waiter = self._loop.create_future()
        self._waiters.append(waiter)
        if len(self._waiters) == 1:
            self._loop.call_soon(self._scheduled_flush)
        await waiter

    @contextmanager
    def grouped(self, loop: Any) -> Iterator[None]:
        """Group commit for the duration of a run on ``loop``; everything is committed after."""
        self._loop = loop
        try:
            yield
        finally:
            self._loop = None
            self.flush()

    def _one(self, sql: str, params: Any = ()) -> dict[str, Any] | None:
        cursor = self.db.execute(sql, params)
        row = cursor.fetchone()
        if row is None:
            return None
        return dict(zip([c[0] for c in cursor.description], row, strict=True))

    def _all(self, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        cursor = self.db.execute(sql, params)
        names = [c[0] for c in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def _event(self, job_id: str | None, batch: str | None, kind: str, **detail: Any) -> None:
        self.db.execute(
            "INSERT INTO events (job_id, batch, at, kind, detail_json) VALUES (?, ?, ?, ?, ?)",
            (job_id, batch, _now(), kind, _dumps(scrub_data(detail)) if detail else None),
        )

    # --- admission --------------------------------------------------------------------------

    def batch(self, name: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM batches WHERE name = ?", (name,))

    def batches(self) -> list[dict[str, Any]]:
        return self._all("SELECT * FROM batches ORDER BY created_at")

    def require_batch(self, name: str | None) -> None:
        """Every command's ``--batch``: a name the ledger does not know is a usage error (exit
        2) that lists the batches it does know, never an empty answer that looks like zero."""
        if name is None or self.batch(name) is not None:
            return
        known = [row["name"] for row in self.batches()]
        listed = ", ".join(known) if known else "none yet"
        raise UsageError(f"no batch {name!r} in {self.path}; known batches: {listed}")

    def check_storage(self, batch: str, storage: str | None) -> str | None:
        """The storage a batch is bound to; refuses a different one named explicitly."""
        row = self.batch(batch)
        if row is None:
            return None
        if storage is not None and storage != row["storage"]:
            raise UsageError(
                f"batch {batch!r} stores its outputs in {row['storage']}, not {storage}; "
                "a batch keeps the storage it was first admitted with, so no output is "
                "rendered twice into two places. Use that storage or a new batch name."
            )
        return row["storage"]

    def admit(self, manifest: Any, storage: str, rates: Any) -> AdmitResult:
        """Admit a manifest's jobs idempotently, in one transaction.

        Same key, same request hash: a replay (the existing job is used). Same key, another
        hash: a conflict, reported with both hashes, the stored job untouched. The first replay
        of a job that already succeeded is a render avoided, and is recorded as one with what
        it would have cost (the original render's cost, else the rate card's price).
        """
        rates_json = rates.to_json()
        result = AdmitResult(batch=manifest.batch, storage=storage)
        now = _now()
        with self.tx():
            self.check_storage(manifest.batch, storage)
            self.db.execute(
                "INSERT INTO batches (name, storage, rates_json, limits_json, manifest_path,"
                " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name)"
                " DO UPDATE SET rates_json = excluded.rates_json,"
                " limits_json = excluded.limits_json, manifest_path = excluded.manifest_path,"
                " updated_at = excluded.updated_at",
                (
                    manifest.batch,
                    storage,
                    _dumps(rates_json),
                    _dumps(manifest.limits),
                    manifest.path,
                    now,
                    now,
                ),
            )
            existing = {
                row[0]: row[1:]
                for row in self.db.execute(
                    "SELECT key, request_hash, status, id, webhook_json FROM jobs WHERE batch = ?",
                    (manifest.batch,),
                )
            }
            # In chunks, so a big job list (jobs_from) is never held in memory whole; still
            # one transaction, so a list that fails part-way leaves nothing admitted. The
            # transaction's pages stay in a bigger cache until its commit, instead of spilling
            # to the WAL and being written again by the next chunks (100,000 jobs: a third
            # less CPU; the pages of 100,000 jobs take about 70 MiB).
            cache = self.db.execute("PRAGMA cache_size").fetchone()[0]
            self.db.execute(f"PRAGMA cache_size = {ADMIT_CACHE_KIB}")
            try:
                for chunk in _chunks(manifest.jobs, ADMIT_CHUNK):
                    self._admit_chunk(manifest.batch, chunk, existing, rates, now, result)
            finally:
                self.db.execute(f"PRAGMA cache_size = {int(cache)}")
        return result

    def _admit_chunk(
        self,
        batch: str,
        jobs: list[Any],
        existing: dict[str, tuple],
        rates: Any,
        now: float,
        result: AdmitResult,
    ) -> None:
        from afc_cli.manifest import same_request

        fresh = []
        conflicts: list[dict[str, Any]] = []
        done = []
        rewebhooked = []
        for job in jobs:
            stored, status, job_id, webhook = existing.get(job.key, (None,) * 4)
            stored_body = None
            if stored is not None and stored != job.request_hash:
                # only a changed hash needs the stored body: a body admitted before the rule
                # for defaults may still be this request, else its changes are named
                stored_body = self.db.execute(
                    "SELECT request_json FROM jobs WHERE id = ?", (job_id,)
                ).fetchone()[0]
            if stored is None:
                fresh.append(job)
            elif same_request(stored, stored_body, job):
                result.replayed.append(job.key)
                if status == "succeeded":
                    done.append(job)
                if webhook != _dumps(job.webhook) and status not in TERMINAL:
                    # where events go is not part of the request: the latest manifest says
                    rewebhooked.append((_dumps(job.webhook), job_id))
            else:
                conflicts.append(
                    {
                        "key": job.key,
                        "stored_hash": stored,
                        "new_hash": job.request_hash,
                        "changes": changes_since(stored_body, job.body),
                    }
                )
        ordered = sorted(fresh, key=_job_id)  # the table is clustered on the (random) id
        self.db.conn.executemany(
            "INSERT INTO jobs (id, batch, key, seq, request_hash, request_json, output_key,"
            " webhook_json, status, step, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'queued', 'probe', ?, ?)"
            " ON CONFLICT (batch, key) DO NOTHING",
            [
                (
                    j.job_id,
                    batch,
                    j.key,
                    j.index,
                    j.request_hash,
                    j.request_json or _dumps(j.body),  # the same text, made from shared parts
                    j.output_key,
                    _dumps(j.webhook),
                    now,
                    now,
                )
                for j in ordered
            ],
        )
        self.db.conn.executemany(
            "INSERT INTO events (job_id, batch, at, kind, detail_json) VALUES (?, ?, ?, ?, ?)",
            # _dumps({"hash": ...}) of a hex digest, written out; in job id order, as the
            # events' (job_id, id) index is
            [(j.job_id, batch, now, "admitted", f'{{"hash":"{j.request_hash}"}}') for j in ordered]
            + [
                (
                    None,
                    batch,
                    now,
                    "conflict_refused",
                    _dumps(c),
                )
                for c in conflicts
            ],
        )
        if done:
            self._record_replays_avoided(batch, done, rates, now)
        if rewebhooked:
            self.db.conn.executemany("UPDATE jobs SET webhook_json = ? WHERE id = ?", rewebhooked)
        result.new.extend(j.key for j in fresh)
        result.conflicts.extend(conflicts)

    def _record_replays_avoided(self, batch: str, jobs: list[Any], rates: Any, now: float) -> None:
        """Count each job's avoided render once: a replay of a job already counted (by an
        earlier replay, or when a fresh ledger found its output) adds nothing, so a cron job
        replaying a finished batch every five minutes claims no new savings."""
        counted = {
            row[0]
            for row in self.db.execute("SELECT job_id FROM avoided WHERE batch = ?", (batch,))
        }
        jobs = [job for job in jobs if job.job_id not in counted]
        if not jobs:
            return
        renders: dict[str, tuple] = {}
        for row in self.db.execute(
            "SELECT a.job_id, a.provider, a.model, a.cost_micros, a.cost_source FROM attempts a"
            " JOIN jobs j ON j.id = a.job_id WHERE j.batch = ? AND a.status = 'succeeded'"
            " UNION ALL SELECT job_id, provider, model, cost_micros, cost_source FROM avoided"
            " WHERE batch = ? AND reason = 'stored'",
            (batch, batch),
        ):
            renders.setdefault(row[0], row[1:])
        rows = []
        for job in jobs:
            provider, model, cost, source = renders.get(job.job_id) or (
                job.chain[0]["provider"],
                job.chain[0]["model"],
                None,
                None,
            )
            if cost is None and provider is not None:
                cost = rates.estimate(provider, model)
                source = "rate_card" if cost is not None else None
            rows.append((job.job_id, batch, now, "replay", provider, model, cost, source))
        self.db.conn.executemany(
            "INSERT INTO avoided (job_id, batch, at, reason, provider, model, cost_micros,"
            " cost_source) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )

    # --- reading ----------------------------------------------------------------------------

    def job(self, job_id: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM jobs WHERE id = ?", (job_id,))

    def jobs_by_key(self, key: str, batch: str | None = None) -> list[dict[str, Any]]:
        if batch is None:
            return self._all("SELECT * FROM jobs WHERE key = ? ORDER BY created_at", (key,))
        return self._all("SELECT * FROM jobs WHERE key = ? AND batch = ?", (key, batch))

    def batches_of(self, job_ids: list[str]) -> list[str]:
        rows = self.db.execute(
            "SELECT DISTINCT batch FROM jobs WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps(job_ids),),
        )
        return sorted(row[0] for row in rows)

    def output_keys(self, batch: str, job_ids: list[str]) -> list[str]:
        """The output keys of the given jobs in one batch (for the storage pre-check)."""
        rows = self.db.execute(
            "SELECT output_key FROM jobs WHERE batch = ? AND id IN "
            "(SELECT value FROM json_each(?))",
            (batch, json.dumps(job_ids)),
        )
        return [row[0] for row in rows]

    def batch_jobs(self, batch: str) -> list[dict[str, Any]]:
        return self._all("SELECT * FROM jobs WHERE batch = ? ORDER BY seq", (batch,))

    def runnable_job_ids(
        self, batch: str | None = None, keys: list[str] | None = None
    ) -> list[str]:
        sql = f"SELECT id, key FROM jobs WHERE status IN {ACTIVE_SQL}"
        params: list[Any] = []
        if batch is not None:
            sql += " AND batch = ?"
            params.append(batch)
        sql += " ORDER BY batch, seq"
        rows = self.db.execute(sql, params).fetchall()
        if keys is not None:
            wanted = set(keys)
            return [job_id for job_id, key in rows if key in wanted]
        return [job_id for job_id, _ in rows]

    def status_rows(self, batch: str | None = None) -> list[dict[str, Any]]:
        sql = (
            "SELECT j.id, j.key, j.batch, j.status, j.step, j.output_key, j.attempts, j.error_code,"
            " j.error_class, j.error_message, j.waiting_reason, j.lease_owner, j.lease_expires, "
            + JOB_COST_SQL
            + " FROM jobs j"
        )
        params: list[Any] = []
        if batch is not None:
            sql += " WHERE j.batch = ?"
            params.append(batch)
        sql += " ORDER BY j.batch, j.seq"
        return self._all(sql, params)

    def output_rows(self, batch: str | None = None) -> list[dict[str, Any]]:
        """Succeeded jobs with their stored output: where it is, what it is, what it cost, and
        the model that made it (the succeeded attempt's, else what storage metadata named)."""
        sql = (
            "SELECT j.id, j.key, j.batch, j.output_key, j.output_size, j.output_sha256,"
            " j.request_json, b.storage, " + JOB_COST_SQL + ","
            " COALESCE((SELECT a.provider || '/' || a.model FROM attempts a WHERE a.job_id = j.id"
            " AND a.status = 'succeeded' ORDER BY a.number DESC LIMIT 1),"
            " (SELECT v.provider || '/' || v.model FROM avoided v WHERE v.job_id = j.id"
            " AND v.reason = 'stored' ORDER BY v.at DESC LIMIT 1)) AS model"
            " FROM jobs j JOIN batches b ON b.name = j.batch WHERE j.status = 'succeeded'"
        )
        params: list[Any] = []
        if batch is not None:
            sql += " AND j.batch = ?"
            params.append(batch)
        sql += " ORDER BY j.batch, j.seq"
        return self._all(sql, params)

    def steps(self, job_id: str) -> list[dict[str, Any]]:
        return self._all(
            "SELECT * FROM steps WHERE job_id = ? ORDER BY completed_at, CASE step"
            " WHEN 'probe' THEN 1 WHEN 'render' THEN 2 WHEN 'spool' THEN 3 WHEN 'store' THEN 4"
            " WHEN 'verify' THEN 5 ELSE 6 END",
            (job_id,),
        )

    def attempts(self, job_id: str) -> list[dict[str, Any]]:
        return self._all("SELECT * FROM attempts WHERE job_id = ? ORDER BY number", (job_id,))

    def events(self, job_id: str) -> list[dict[str, Any]]:
        return self._all("SELECT * FROM events WHERE job_id = ? ORDER BY id", (job_id,))

    # --- claiming -----------------------------------------------------------------------------

    def claim(self, job_id: str, lease_s: float) -> dict[str, Any] | None:
        """Take a job for this process, or None if it is terminal or another live run holds it.

        Taking over from a dead or expired owner marks that owner's attempts left ``started``
        as ``unknown``: possibly paid, unpriced, never deleted.
        """
        now = _now()
        with self.tx():
            # The usual case first, in one statement: a free job is simply taken.
            taken = self._all(
                "UPDATE jobs SET lease_owner = ?, lease_expires = ?, updated_at = ?"
                f" WHERE id = ? AND lease_owner IS NULL AND status NOT IN {TERMINAL_SQL}"
                " RETURNING *",
                (self.owner, now + lease_s, now, job_id),
            )
            if taken:
                job = taken[0]
                if job["attempts"]:
                    self._mark_unknown(job_id, job["batch"], exclude_owner=self.owner)
                return job
            job = self.job(job_id)
            if job is None or job["status"] in TERMINAL:
                return None
            holder = job["lease_owner"]
            mine = holder == self.owner
            free = (
                holder is None or mine or (job["lease_expires"] or 0) < now or owner_is_dead(holder)
            )
            if not free:
                return None
            cursor = self.db.execute(
                "UPDATE jobs SET lease_owner = ?, lease_expires = ?, updated_at = ?,"
                " takeovers = takeovers + ? WHERE id = ? AND lease_owner IS ?"
                f" AND status NOT IN {TERMINAL_SQL}",
                (
                    self.owner,
                    now + lease_s,
                    now,
                    0 if holder is None or mine else 1,
                    job_id,
                    holder,
                ),
            )
            if cursor.rowcount != 1:
                return None
            if job["attempts"]:
                self._mark_unknown(job_id, job["batch"], exclude_owner=self.owner)
            job.update(lease_owner=self.owner, lease_expires=now + lease_s, updated_at=now)
            if holder is not None and not mine:
                self._event(job_id, job["batch"], "takeover", previous_owner=holder)
                job["takeovers"] += 1
                if job["takeovers"] > MAX_TAKEOVERS:
                    # The runs working on it keep dying (a crash loop): stop retrying it on
                    # our own and leave it for a person, with its whole history.
                    self.finish(
                        job,
                        "dead",
                        step=job["step"],
                        error_code="CRASH_LOOP",
                        error_message=f"the run working on this job ended without finishing "
                        f"it {job['takeovers']} times; see its events and attempts (afc show "
                        f"{job['key']}), fix the cause, then 'afc retry {job['key']}'",
                    )
                    return None
            return job

    def _mark_unknown(self, job_id: str, batch: str, exclude_owner: str | None) -> int:
        """Attempts a run left ``started`` become ``unknown`` (possibly paid) with the class
        ``interrupted``: they are kept and counted as spend of unknown cost, but never use up
        a model's attempts (attempts.py). Returns how many."""
        rows = self._all(
            "SELECT number, provider, owner FROM attempts WHERE job_id = ? AND status = 'started'"
            " AND (owner IS NOT ? OR ? IS NULL)",
            (job_id, exclude_owner, exclude_owner),
        )
        for row in rows:
            self.db.execute(
                "UPDATE attempts SET status = 'unknown', error_class = 'interrupted', ended_at = ?,"
                " error_message = ? WHERE job_id = ? AND number = ? AND status = 'started'",
                (_now(), INTERRUPTED_MESSAGE, job_id, row["number"]),
            )
            self._event(
                job_id, batch, "attempt_unknown", number=row["number"], provider=row["provider"]
            )
        return len(rows)

    def renew_leases(self, lease_s: float) -> None:
        with self.tx():
            self.db.execute(
                f"UPDATE jobs SET lease_expires = ? WHERE lease_owner = ?"
                f" AND status NOT IN {TERMINAL_SQL}",
                (_now() + lease_s, self.owner),
            )

    def release_all(self) -> int:
        """At the end of an interrupted run: the attempts still in flight (abandoned) become
        unknown, our leases are freed. Returns how many attempts were abandoned."""
        abandoned = 0
        with self.tx():
            for row in self._all("SELECT id, batch FROM jobs WHERE lease_owner = ?", (self.owner,)):
                abandoned += self._mark_unknown(row["id"], row["batch"], exclude_owner=None)
                self._event(row["id"], row["batch"], "released", reason="interrupted")
            self.db.execute(
                "UPDATE jobs SET lease_owner = NULL, lease_expires = NULL,"
                " status = CASE WHEN status = 'running' THEN 'queued' ELSE status END"
                f" WHERE lease_owner = ? AND status NOT IN {TERMINAL_SQL}",
                (self.owner,),
            )
        return abandoned

    def note(self, job: dict[str, Any], kind: str, **detail: Any) -> None:
        """Append an event to a job's log, whatever its state."""
        with self.tx():
            self._event(job["id"], job["batch"], kind, **detail)

    def cancel(self, job: dict[str, Any], reason: str) -> bool:
        """Cancel a job: final, through the same first-terminal-wins update as any ending."""
        return self.finish(
            job, "cancelled", step=job["step"], error_code="CANCELLED", error_message=reason
        )

    def queue_stats(self, now: float | None = None) -> dict[str, Any]:
        """Backlog figures for alerting: queued, in flight, delayed, dead-lettered, failed
        (both wait for a person: ``afc retry``), and the age of the oldest unfinished job."""
        now = _now() if now is None else now
        counts: dict[str, int] = {}
        # grouped in the order of the (batch, status) index: no sort of every job's status
        # (on 100,000 jobs a third of the time)
        for _batch, status, count in self.db.execute(
            "SELECT batch, status, COUNT(*) FROM jobs GROUP BY batch, status"
        ):
            counts[status] = counts.get(status, 0) + count
        oldest = self.db.execute(
            f"SELECT MIN(created_at) FROM jobs WHERE status IN {ACTIVE_SQL}"
        ).fetchone()[0]
        return {
            "queued": counts.get("queued", 0),
            "in_flight": counts.get("running", 0),
            "delayed": counts.get("waiting", 0),
            "dlq": counts.get("dead", 0),
            "failed": counts.get("failed", 0),
            "oldest_age_seconds": 0 if oldest is None else int(now - oldest),
        }

    def retry(self, job: dict[str, Any], by: str) -> bool:
        """Put a failed, dead-lettered or cancelled job back to ``queued``: a person's decision.

        Its key, request hash and whole history stay; the attempts so far stop counting toward
        its chain (``attempt_base``), and it starts again at the probe, so an output it already
        stored (or a spool file it left) is used before anything is paid for. A conditional
        update: of two racing retries, or a retry racing a worker's terminal write, one wins.
        Returns False (writing nothing) if the job is not failed, dead or cancelled.
        """
        now = _now()
        with self.tx():
            cursor = self.db.execute(
                "UPDATE jobs SET status = 'queued', step = 'probe', attempt_base = attempts,"
                " retries = retries + 1,"
                " takeovers = 0, store_failures = 0, lease_owner = NULL, lease_expires = NULL,"
                " outcome = NULL, error_code = NULL, error_class = NULL, error_provider = NULL,"
                " error_http_status = NULL, error_message = NULL, waiting_reason = NULL,"
                " finished_at = NULL, updated_at = ?"
                " WHERE id = ? AND status IN ('failed', 'dead', 'cancelled')",
                (now, job["id"]),
            )
            if cursor.rowcount != 1:
                return False
            self._event(
                job["id"],
                job["batch"],
                "retried",
                by=by,
                previous_status=job["status"],
                previous_error=job.get("error_code"),
            )
        return True

    def release(self, job: dict[str, Any]) -> None:
        """Free a job this run holds but did not finish (it waits, or the run is stopping);
        a job left ``running`` goes back to ``queued``."""
        with self.tx():
            cursor = self.db.execute(
                "UPDATE jobs SET lease_owner = NULL, lease_expires = NULL,"
                " status = CASE WHEN status = 'running' THEN 'queued' ELSE status END"
                " WHERE id = ? AND lease_owner = ?",
                (job["id"], self.owner),
            )
        if cursor.rowcount == 1:
            job.update(lease_owner=None, lease_expires=None)
            if job["status"] == "running":
                job["status"] = "queued"

    # --- steps ----------------------------------------------------------------------------------

    def _checkpoint(self, job: dict[str, Any], steps: Any) -> None:
        """Record completed steps, ``[(step, detail), ...]``, in one statement."""
        steps = list(steps)
        if not steps:
            return
        now = _now()
        params: list[Any] = []
        for step, detail in steps:
            params += (job["id"], step, now, _dumps(detail))
        self.db.execute(
            "INSERT INTO steps (job_id, step, completed_at, detail_json) VALUES "
            + ", ".join(["(?, ?, ?, ?)"] * len(steps))
            + " ON CONFLICT (job_id, step) DO NOTHING",
            params,
        )

    def checkpoint(
        self,
        job: dict[str, Any],
        steps: list[tuple[str, dict[str, Any] | None]],
        next_step: str,
        **updates: Any,
    ) -> None:
        """Record completed steps and move the job to its next step, in one transaction.

        Raises JobLost (writing nothing) if the job ended meanwhile, e.g. it was cancelled."""
        with self.tx():
            self._update_job(job, step=next_step, **updates)  # refuses before writing
            self._checkpoint(job, steps)

    def _update_job(self, job: dict[str, Any], **updates: Any) -> None:
        """Conditional update of a non-terminal job we hold; keeps ``job`` in step with it."""
        updates["updated_at"] = _now()
        assignments = ", ".join(f"{name} = ?" for name in updates)
        cursor = self.db.execute(
            f"UPDATE jobs SET {assignments} WHERE id = ? AND lease_owner = ?"
            f" AND status NOT IN {TERMINAL_SQL}",
            [*updates.values(), job["id"], self.owner],
        )
        if cursor.rowcount != 1:
            raise JobLost(job["id"])
        job.update(updates)

    def set_waiting(self, job: dict[str, Any], reason: str, **updates: Any) -> None:
        with self.tx():
            self._update_job(job, status="waiting", waiting_reason=reason, **updates)
            self._event(job["id"], job["batch"], "waiting", reason=reason)

    # --- attempts -------------------------------------------------------------------------------

    def start_attempt(
        self,
        job: dict[str, Any],
        chain_index: int,
        provider: str,
        model: str,
        wait_s: float | None,
        *,
        durable: bool,
        run_id: str | None = None,
        reserve_micros: int | None = None,
        cap_micros: int | None = None,
    ) -> int | None:
        """Commit an attempt row (status ``started``) before its provider call.

        Under a budget (``cap_micros``), the attempt's estimated cost is reserved in this same
        transaction: the run's spend so far (each attempt's known cost, else its reservation)
        plus this estimate must fit the cap, or BudgetExhausted is raised and nothing is
        written. Transactions are serialised, so no number of concurrent workers can start
        more than the budget allows.

        Returns the attempt number, or None if the job is no longer ours or no longer active.
        """
        now = _now()
        # Committed before the call: here outside a run loop (synced alone when durable);
        # otherwise the caller awaits ``committed()``, shared with other jobs starting now,
        # which also syncs the WAL when any of them is durable.
        with self.tx(sync_on_commit=durable):
            if cap_micros is not None:
                spent = self.run_spend(run_id)
                if spent + (reserve_micros or 0) > cap_micros:
                    raise BudgetExhausted(spent, cap_micros, reserve_micros or 0)
            cursor = self.db.execute(
                "UPDATE jobs SET attempts = ?, status = 'running',"
                " waiting_reason = NULL, updated_at = ? WHERE id = ? AND lease_owner = ?"
                f" AND attempts = ? AND status NOT IN {TERMINAL_SQL}",
                (job["attempts"] + 1, now, job["id"], self.owner, job["attempts"]),
            )
            if cursor.rowcount != 1:
                return None
            number = job["attempts"] + 1
            job.update(attempts=number, status="running", waiting_reason=None, updated_at=now)
            self.db.execute(
                "INSERT INTO attempts (job_id, number, chain_index, provider, model, status,"
                " owner, wait_s, started_at, run_id, reserved_micros)"
                " VALUES (?, ?, ?, ?, ?, 'started', ?, ?, ?, ?, ?)",
                (
                    job["id"],
                    number,
                    chain_index,
                    provider,
                    model,
                    self.owner,
                    wait_s,
                    now,
                    run_id,
                    reserve_micros,
                ),
            )
        return number

    def record_request_id(
        self, job: dict[str, Any], number: int, provider: str, request_id: str
    ) -> None:
        """Commit a job-style provider's request id the moment its submit returned: a run
        that dies after this polls the request instead of paying for a new one. In a run
        loop the caller awaits ``committed()``: a synced commit shared with the other submits
        that returned together (a thousand predictions submitted at once measured 27 s for
        5 s of work when each id was a synced commit of its own, the loop blocked on them)."""
        with self.tx(sync_on_commit=provider != "local"):
            self.db.execute(
                "UPDATE attempts SET provider_request_id = ? WHERE job_id = ? AND number = ?",
                (request_id, job["id"], number),
            )

    def reopen_attempt(self, job: dict[str, Any], attempt: dict[str, Any]) -> bool:
        """Take over an attempt a dead run left submitted, to poll it to its end."""
        with self.tx(commit=True):
            cursor = self.db.execute(
                "UPDATE attempts SET status = 'started', owner = ?, ended_at = NULL,"
                " error_class = NULL, error_message = NULL WHERE id = ? AND status = 'unknown'",
                (self.owner, attempt["id"]),
            )
            if cursor.rowcount == 1:
                self._event(
                    job["id"],
                    job["batch"],
                    "attempt_resumed",
                    number=attempt["number"],
                    request=attempt["provider_request_id"],
                )
            return cursor.rowcount == 1

    def interrupt_attempt(self, job: dict[str, Any], number: int) -> None:
        """A stopping run leaves a submitted job-style request (its id committed) to the next
        run: the attempt becomes ``unknown``/``interrupted`` until that run polls it again."""
        with self.tx(commit=True):
            self.db.execute(
                "UPDATE attempts SET status = 'unknown', error_class = 'interrupted',"
                " ended_at = ?, error_message = ? WHERE job_id = ? AND number = ?"
                " AND status = 'started'",
                (
                    _now(),
                    "afc stopped while the provider rendered it; the next run polls the request",
                    job["id"],
                    number,
                ),
            )
            self._event(job["id"], job["batch"], "attempt_left_polling", number=number)

    def run_spend(self, run_id: str | None) -> int:
        """What a run's budget counts: known costs, and reservations where the cost is unknown
        (never shown as the run's spend: that is ``run_money``'s ``priced``)."""
        row = self.db.execute(
            "SELECT COALESCE(SUM(COALESCE(cost_micros, reserved_micros, 0)), 0)"
            " FROM attempts WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        return int(row[0])

    def run_money(self, run_id: str | None) -> dict[str, int]:
        """A run's money as shown to a person: ``priced`` (the known costs of its attempts,
        the figure ``afc costs report`` sums as ``priced``), ``unknown_cost`` (its attempts
        whose cost is unknown: unpriced, or possibly paid) and ``reserved`` (the estimates
        the budget holds for those). ``run_spend`` adds the two for the budget only."""
        row = self.db.execute(
            "SELECT COALESCE(SUM(cost_micros), 0), COUNT(*) - COUNT(cost_micros),"
            " COALESCE(SUM(CASE WHEN cost_micros IS NULL THEN reserved_micros END), 0)"
            " FROM attempts WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        return {"priced": int(row[0]), "unknown_cost": int(row[1]), "reserved": int(row[2])}

    def record_avoided(
        self,
        job: dict[str, Any],
        reason: str,
        provider: str | None,
        model: str | None,
        cost_micros: int | None,
        cost_source: str | None,
    ) -> None:
        """A render that a stored output made unnecessary, and what it would have cost."""
        self.db.execute(
            "INSERT INTO avoided (job_id, batch, at, reason, provider, model, cost_micros,"
            " cost_source) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (job["id"], job["batch"], _now(), reason, provider, model, cost_micros, cost_source),
        )

    def report_attempt(
        self,
        job: dict[str, Any],
        number: int,
        *,
        chain_index: int,
        provider: str,
        model: str,
        status: str,
        error_class: str | None = None,
        http_status: int | None = None,
        error_message: str | None = None,
        provider_request_id: str | None = None,
        usage: dict[str, Any] | None = None,
        cost_micros: int | None = None,
        cost_source: str | None = None,
        started_at: float | None = None,
        ended_at: float | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        """Upsert on (job, provider, attempt number).

        A repeated report overwrites usage and cost, but never outcome, error or timing: the
        first report of an outcome stands.
        """
        ended = ended_at if ended_at is not None else _now()
        self.db.execute(
            "INSERT INTO attempts (job_id, number, chain_index, provider, model, status,"
            " error_class, http_status, error_message, provider_request_id, owner, started_at,"
            " ended_at, duration_s, usage_json, cost_micros, cost_source, retry_after_s)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (job_id, provider, number) DO UPDATE SET"
            " usage_json = excluded.usage_json,"
            " cost_micros = excluded.cost_micros,"
            " cost_source = excluded.cost_source,"
            " provider_request_id = COALESCE(attempts.provider_request_id,"
            "   excluded.provider_request_id),"
            " status = CASE WHEN attempts.status = 'started' THEN excluded.status"
            "   ELSE attempts.status END,"
            " error_class = CASE WHEN attempts.status = 'started' THEN excluded.error_class"
            "   ELSE attempts.error_class END,"
            " http_status = CASE WHEN attempts.status = 'started' THEN excluded.http_status"
            "   ELSE attempts.http_status END,"
            " error_message = CASE WHEN attempts.status = 'started' THEN excluded.error_message"
            "   ELSE attempts.error_message END,"
            " ended_at = CASE WHEN attempts.status = 'started' THEN excluded.ended_at"
            "   ELSE attempts.ended_at END,"
            " retry_after_s = CASE WHEN attempts.status = 'started' THEN excluded.retry_after_s"
            "   ELSE attempts.retry_after_s END,"
            " duration_s = CASE WHEN attempts.status = 'started'"
            "   THEN excluded.ended_at - attempts.started_at ELSE attempts.duration_s END",
            (
                job["id"],
                number,
                chain_index,
                provider,
                model,
                status,
                error_class,
                http_status,
                scrub(error_message),
                provider_request_id,
                self.owner,
                started_at if started_at is not None else ended,
                ended,
                (ended - started_at) if started_at is not None else 0.0,
                _dumps(usage),
                cost_micros,
                cost_source,
                retry_after_s,
            ),
        )

    def end_attempt(self, job: dict[str, Any], number: int, **report: Any) -> None:
        with self.tx(commit=True):
            self.report_attempt(job, number, **report)

    # --- terminal writes ------------------------------------------------------------------------

    def finish(
        self,
        job: dict[str, Any],
        status: str,
        *,
        step: str,
        detail: dict[str, Any] | None = None,
        steps: Any = (),
        **fields: Any,
    ) -> bool:
        """Move a job to a terminal state. The first terminal state wins: this is a conditional
        update that matches only a non-terminal row, and a loser changes nothing."""
        assert status in TERMINAL
        now = _now()
        if fields.get("error_message"):
            fields["error_message"] = scrub(fields["error_message"])
        with self.tx():
            values = {
                "status": status,
                "step": "done" if status == "succeeded" else step,
                "lease_owner": None,
                "lease_expires": None,
                "waiting_reason": None,
                "finished_at": now,
                "updated_at": now,
                **fields,
            }
            assignments = ", ".join(f"{name} = ?" for name in values)
            cursor = self.db.execute(
                f"UPDATE jobs SET {assignments} WHERE id = ? AND status NOT IN {TERMINAL_SQL}",
                [*values.values(), job["id"]],
            )
            if cursor.rowcount != 1:
                return False
            job.update(values)
            self._checkpoint(
                job, [*steps, *([("finish", detail)] if status == "succeeded" else [])]
            )
            self._event(
                job["id"],
                job["batch"],
                status,
                **(detail or {}),
                **{k: v for k, v in fields.items() if k.startswith("error_") or k == "outcome"},
            )
            if job.get("webhook_json"):
                self._queue_delivery(job, now)
        return True

    # --- webhook outbox ---------------------------------------------------------------------

    def has_webhooks(self) -> bool:
        row = self.db.execute(
            "SELECT EXISTS (SELECT 1 FROM deliveries WHERE status = 'pending')"
            " OR EXISTS (SELECT 1 FROM jobs WHERE webhook_json IS NOT NULL"
            f" AND status IN {ACTIVE_SQL})"
        ).fetchone()
        return bool(row[0])

    def webhook_secret_names(self, job_ids: list[str] | None = None) -> set[str]:
        names = {
            row[0]
            for row in self.db.execute(
                "SELECT DISTINCT secret_env FROM deliveries WHERE status = 'pending'"
            )
        }
        sql = "SELECT DISTINCT webhook_json FROM jobs WHERE webhook_json IS NOT NULL"
        params: tuple = ()
        if job_ids is not None:
            sql += " AND id IN (SELECT value FROM json_each(?))"
            params = (json.dumps(job_ids),)
        for (text,) in self.db.execute(sql, params):
            names.add(json.loads(text)["secret_env"])
        return names

    def due_deliveries(self, now: float, limit: int) -> list[dict[str, Any]]:
        return self._all(
            "SELECT * FROM deliveries WHERE status = 'pending' AND next_attempt_at <= ?"
            " AND (lease_owner IS NULL OR lease_expires < ?) ORDER BY next_attempt_at LIMIT ?",
            (now, now, limit),
        )

    def claim_delivery(self, delivery_id: str, now: float, lease_s: float) -> bool:
        with self.tx(commit=True):
            cursor = self.db.execute(
                "UPDATE deliveries SET lease_owner = ?, lease_expires = ? WHERE id = ?"
                " AND status = 'pending' AND (lease_owner IS NULL OR lease_expires < ?)",
                (self.owner, now + lease_s, delivery_id, now),
            )
            return cursor.rowcount == 1

    def release_delivery(self, delivery_id: str, note: str) -> None:
        with self.tx():
            self.db.execute(
                "UPDATE deliveries SET lease_owner = NULL, lease_expires = NULL, last_error = ?"
                " WHERE id = ? AND lease_owner = ?",
                (note, delivery_id, self.owner),
            )

    def delivery_outcome(
        self,
        delivery_id: str,
        status: str,
        http_status: int | None,
        error: str | None,
        now: float,
    ) -> None:
        with self.tx(commit=True):
            self.db.execute(
                "UPDATE deliveries SET status = ?, attempts = attempts + 1, last_status = ?,"
                " last_error = ?, delivered_at = CASE WHEN ? = 'delivered' THEN ? END,"
                " lease_owner = NULL, lease_expires = NULL WHERE id = ?",
                (status, http_status, error, status, now, delivery_id),
            )

    def delivery_retry(
        self,
        delivery_id: str,
        http_status: int | None,
        error: str | None,
        next_at: float,
        now: float,
    ) -> None:
        with self.tx(commit=True):
            self.db.execute(
                "UPDATE deliveries SET attempts = attempts + 1, last_status = ?, last_error = ?,"
                " next_attempt_at = ?, lease_owner = NULL, lease_expires = NULL WHERE id = ?",
                (http_status, error, next_at, delivery_id),
            )

    def endpoint_disabled(self, url: str) -> bool:
        row = self.db.execute("SELECT disabled_at FROM endpoints WHERE url = ?", (url,)).fetchone()
        return bool(row and row[0])

    def disable_endpoint(self, url: str, reason: str, now: float) -> None:
        with self.tx(commit=True):
            self.db.execute(
                "INSERT INTO endpoints (url, disabled_at, reason) VALUES (?, ?, ?)"
                " ON CONFLICT (url) DO UPDATE SET disabled_at = excluded.disabled_at,"
                " reason = excluded.reason",
                (url, now, reason),
            )

    def deliveries(self, dead_only: bool = False) -> list[dict[str, Any]]:
        sql = "SELECT * FROM deliveries"
        if dead_only:
            sql += " WHERE status = 'dead'"
        return self._all(sql + " ORDER BY created_at, id")

    def job_deliveries(self, job_id: str) -> list[dict[str, Any]]:
        return self._all("SELECT * FROM deliveries WHERE job_id = ? ORDER BY created_at", (job_id,))

    def delivery(self, delivery_id: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM deliveries WHERE id = ?", (delivery_id,))

    def delivery_ids_starting(self, prefix: str, limit: int = 6) -> list[str]:
        """Ids of deliveries that begin with ``prefix`` (ids are accepted by unique prefix)."""
        rows = self.db.execute(
            "SELECT id FROM deliveries WHERE substr(id, 1, ?) = ? ORDER BY id LIMIT ?",
            (len(prefix), prefix, limit),
        )
        return [row[0] for row in rows]

    def requeue_delivery(self, delivery_id: str, now: float) -> None:
        with self.tx():
            row = self.delivery(delivery_id)
            self.db.execute(
                "UPDATE deliveries SET status = 'pending', attempts = 0, next_attempt_at = ?,"
                " last_error = NULL, lease_owner = NULL, lease_expires = NULL WHERE id = ?",
                (now, delivery_id),
            )
            self.db.execute("DELETE FROM endpoints WHERE url = ?", (row["url"],))
            self._event(row["job_id"], row["batch"], "webhook_replayed", delivery=delivery_id)

    def _queue_delivery(self, job: dict[str, Any], now: float) -> None:
        """The transactional outbox: the delivery row commits with the terminal update that
        produced it, so no terminal state exists without its event. Its id is stable (job id
        and event, and the retry count once a person retried the job: each retry's ending is
        news of its own), and inserting it again does nothing."""
        from afc_cli.costs import job_cost

        webhook = json.loads(job["webhook_json"])
        event = "failed" if job["status"] == "dead" else job["status"]
        priced = self.db.execute(
            "SELECT SUM(cost_micros), COUNT(*) FROM attempts WHERE job_id = ?", (job["id"],)
        ).fetchone()
        error = None
        if job.get("error_message"):
            error = {
                "code": job.get("error_code"),
                "class": job.get("error_class"),
                "message": scrub(job.get("error_message")),
            }
        envelope = {
            "type": f"job.{event}",
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
            "data": {
                "job_id": job["id"],
                "key": job["key"],
                "batch": job["batch"],
                "status": job["status"],
                "output_key": job["output_key"] if job["status"] == "succeeded" else None,
                "cost": job_cost(priced[0], priced[1]),
                "error": error,
            },
        }
        self.db.execute(
            "INSERT INTO deliveries (id, job_id, batch, event, url, secret_env, timeout_s,"
            " envelope, status, next_attempt_at, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?) ON CONFLICT (id) DO NOTHING",
            (
                f"{job['id']}:job.{event}"
                + (f":retry{job['retries']}" if job.get("retries") else ""),
                job["id"],
                job["batch"],
                f"job.{event}",
                webhook["url"],
                webhook["secret_env"],
                webhook.get("timeout_s", 10.0),
                json.dumps(envelope, separators=(",", ":")),
                now,
                now,
            ),
        )
