"""Running jobs: admission (submit), the run loop (submit and resume), and its result.

Jobs run concurrently on one asyncio loop: provider calls are long waits, so hundreds in flight
cost coroutines, not threads. The ledger connection belongs to the loop's thread; blocking file
work (fsync, hashing) goes to worker threads. A semaphore of ``concurrency`` slots bounds the
jobs doing work at once; a job waiting out a backoff gives its slot back.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from afc_cli import storage as storage_mod
from afc_cli.costs import RateCards
from afc_cli.errors import EXIT_CONFLICT, EXIT_JOB_FAILED, EXIT_OK, UsageError
from afc_cli.ledger import AdmitResult, Ledger
from afc_cli.manifest import load_manifest
from afc_cli.pipeline import RunContext, run_job
from afc_cli.spool import Spool

DEFAULT_CONCURRENCY = 8
LEASE_S = 300.0


class Reporter:
    """Told about progress; the CLI shows it as a progress bar or as plain lines."""

    def begin(self, total: int) -> None:
        pass

    def event(self, job: dict[str, Any], event: str, detail: str) -> None:
        pass

    def end(self) -> None:
        pass


@dataclass
class RunResult:
    """What a submit or resume did, and the exit code it earns."""

    jobs: list[dict[str, Any]] = field(default_factory=list)  # status rows of requested jobs
    admit: AdmitResult | None = None
    ran: int = 0

    @property
    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for row in self.jobs:
            counts[row["status"]] = counts.get(row["status"], 0) + 1
        return counts

    @property
    def exit_code(self) -> int:
        if self.admit is not None and self.admit.conflicts:
            return EXIT_CONFLICT
        if any(row["status"] != "succeeded" for row in self.jobs):
            return EXIT_JOB_FAILED
        return EXIT_OK


def resolve_storage(
    cli_storage: str | None, manifest_storage: str | None, base: Path
) -> str | None:
    """The storage named explicitly (command line or AFC_STORAGE over the manifest), or None."""
    if cli_storage:
        return storage_mod.normalize_url(cli_storage)
    if manifest_storage:
        # relative file:// paths in a manifest are relative to the manifest's folder
        return storage_mod.normalize_url(manifest_storage, base=base)
    return None


def submit(
    manifest_path: str,
    *,
    ledger_path: str,
    storage: str | None,
    concurrency: int,
    run: bool = True,
    reporter: Reporter | None = None,
) -> RunResult:
    manifest = load_manifest(manifest_path)  # raises before the ledger is even opened
    named = resolve_storage(storage, manifest.storage, Path(manifest_path).resolve().parent)
    rates = RateCards.from_rates(manifest.rates).to_json()
    ledger = Ledger(ledger_path)
    try:
        bound = ledger.check_storage(manifest.batch, named)
        chosen = named or bound or storage_mod.normalize_url(storage_mod.DEFAULT_STORAGE)
        admitted = ledger.admit(manifest, chosen, rates)
        keys = admitted.admitted_keys
        if run:
            job_ids = ledger.runnable_job_ids(batch=manifest.batch, keys=keys)
            ran = run_jobs(ledger, job_ids, concurrency=concurrency, reporter=reporter)
        else:
            ran = 0
        wanted = set(keys)
        rows = [r for r in ledger.status_rows(manifest.batch) if r["key"] in wanted]
        return RunResult(jobs=rows, admit=admitted, ran=ran)
    finally:
        ledger.close()


def resume(
    *,
    ledger_path: str,
    batch: str | None,
    storage: str | None,
    concurrency: int,
    reporter: Reporter | None = None,
) -> RunResult:
    ledger = Ledger(ledger_path, create=False)
    try:
        if batch is not None and ledger.batch(batch) is None:
            raise UsageError(f"no batch {batch!r} in {ledger_path}")
        named = storage_mod.normalize_url(storage) if storage else None
        job_ids = ledger.runnable_job_ids(batch=batch)
        batches = {b["name"] for b in ledger.batches()} if batch is None else {batch}
        if named:
            for name in sorted(batches):
                ledger.check_storage(name, named)
        ran = run_jobs(ledger, job_ids, concurrency=concurrency, reporter=reporter)
        wanted = set(job_ids)
        rows = [r for r in ledger.status_rows(batch) if r["id"] in wanted]
        return RunResult(jobs=rows, ran=ran)
    finally:
        ledger.close()


def run_jobs(
    ledger: Ledger,
    job_ids: list[str],
    *,
    concurrency: int,
    reporter: Reporter | None = None,
    lease_s: float = LEASE_S,
) -> int:
    """Run the given jobs to the end of what one run can do. Returns how many were run."""
    if not job_ids:
        return 0
    if concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    reporter = reporter or Reporter()
    storages: dict[str, Any] = {}
    rates: dict[str, RateCards] = {}
    for row in ledger.batches():
        storages[row["name"]] = storage_mod.open(row["storage"])
        rates[row["name"]] = RateCards.from_json(_loads(row["rates_json"]) or [])

    spool = Spool.beside(ledger.path)
    sweep_spool(ledger, spool)

    async def main() -> int:
        ctx = RunContext(
            ledger=ledger,
            spool=spool,
            storages=storages,
            rates=rates,
            slots=asyncio.Semaphore(concurrency),
            lease_s=lease_s,
            report=reporter.event,
        )
        heartbeat = asyncio.create_task(_renew(ledger, lease_s))
        try:
            with ledger.grouped(asyncio.get_running_loop()):
                await asyncio.gather(*(run_job(ctx, job_id) for job_id in job_ids))
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
        return len(job_ids)

    reporter.begin(len(job_ids))
    try:
        return asyncio.run(main())
    except BaseException:
        # Interrupted (Ctrl-C, SIGTERM) or broken: nothing is cancelled; the attempts we had in
        # flight are recorded as unknown and our leases are freed, so the next run resumes.
        with contextlib.suppress(Exception):
            ledger.release_all()
        raise
    finally:
        reporter.end()


def sweep_spool(ledger: Ledger, spool: Spool) -> None:
    """Remove spool files of jobs that succeeded (a crash between the job's final commit and
    the file's removal leaves one). Files of every other job are kept: they are paid output."""
    for job_id in spool.job_ids():
        job = ledger.job(job_id)
        if job is not None and job["status"] == "succeeded":
            spool.remove(job_id)


async def _renew(ledger: Ledger, lease_s: float) -> None:
    while True:
        await asyncio.sleep(lease_s / 3)
        ledger.renew_leases(lease_s)


def _loads(text: str | None) -> Any:
    import json

    return json.loads(text) if text else None
