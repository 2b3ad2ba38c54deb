"""Running jobs: admission (submit), the run loop (submit and resume), and its result.

Jobs run concurrently on one asyncio loop: provider calls are long waits, so hundreds in flight
cost coroutines, not threads. The ledger connection belongs to the loop's thread; blocking file
work (fsync, hashing) goes to worker threads. A semaphore of ``concurrency`` slots bounds the
jobs doing work at once; a job waiting out a backoff gives its slot back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from afc_cli import storage as storage_mod
from afc_cli.costs import RateCards, to_micros
from afc_cli.errors import EXIT_BUDGET, EXIT_CONFLICT, EXIT_JOB_FAILED, EXIT_OK, UsageError
from afc_cli.ledger import AdmitResult, Ledger
from afc_cli.manifest import load_config_rates, load_manifest
from afc_cli.pipeline import ProviderLimit, RunContext, run_job
from afc_cli.spool import Spool

DEFAULT_CONCURRENCY = 8
LEASE_S = 300.0
# Jobs in their storage steps at once (store, verify), apart from --concurrency, which bounds
# paid provider calls. Storage work costs nothing at the provider, and its latency is fsyncs
# and uploads that overlap well: a 10,000-job run of instant renders measured ~40% faster with
# 64 than with 8. (Spool writes have slots of their own: RunContext.spool_slots.)
STORE_SLOTS = 64


class Reporter:
    """Told about progress; the CLI shows it as a progress bar or as plain lines."""

    def begin(self, total: int) -> None:
        pass

    def event(self, job: dict[str, Any], event: str, detail: str) -> None:
        pass

    def end(self) -> None:
        pass


@dataclass(frozen=True)
class Budget:
    """A run's spending cap (``--max-spend`` or the manifest's ``budget``)."""

    cap_micros: int
    allow_unpriced: bool = False

    @classmethod
    def parse(cls, value: str | None, allow_unpriced: bool) -> Budget | None:
        if value is None:
            return None
        try:
            amount = Decimal(value)
        except InvalidOperation:
            raise UsageError(f"--max-spend takes a decimal amount of USD, got {value!r}") from None
        if not amount.is_finite() or amount < 0:
            raise UsageError(f"--max-spend must be a non-negative amount, got {value!r}")
        return cls(to_micros(amount), allow_unpriced)

    def check_priced(self, chains: list[tuple[str, list[dict[str, Any]]]], rates) -> None:
        """Refuse unpriced models under a budget unless --allow-unpriced: a cap cannot hold
        over spend it cannot estimate."""
        if self.allow_unpriced:
            return
        unpriced = sorted(
            {
                f"{entry['provider']}/{entry['model']}"
                for batch, chain in chains
                for entry in chain
                if rates(batch).estimate(entry["provider"], entry["model"]) is None
            }
        )
        if unpriced:
            raise UsageError(
                "a budget needs a per-image rate card for every model that may run; unpriced: "
                + ", ".join(unpriced)
                + ". Add rates, or pass --allow-unpriced (their spend is then not capped)."
            )


@dataclass
class RunStats:
    ran: int = 0
    budget_hit: bool = False
    spent_micros: int = 0


@dataclass
class RunResult:
    """What a submit or resume did, and the exit code it earns."""

    jobs: list[dict[str, Any]] = field(default_factory=list)  # status rows of requested jobs
    admit: AdmitResult | None = None
    stats: RunStats = field(default_factory=RunStats)
    budget: Budget | None = None

    @property
    def ran(self) -> int:
        return self.stats.ran

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
        if self.stats.budget_hit:
            return EXIT_BUDGET
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
    max_spend: str | None = None,
    allow_unpriced: bool = False,
) -> RunResult:
    # everything that can refuse the run is checked before the ledger is even opened
    manifest = load_manifest(manifest_path)
    named = resolve_storage(storage, manifest.storage, Path(manifest_path).resolve().parent)
    rates = manifest_rates(manifest)
    budget = Budget.parse(max_spend if max_spend is not None else manifest.budget, allow_unpriced)
    if budget is not None and run:
        budget.check_priced([(manifest.batch, chain) for chain in manifest.chains], lambda b: rates)
    if run:
        require_keys({entry["provider"] for chain in manifest.chains for entry in chain})
    if run:
        from afc_cli.webhooks import require_secrets

        require_secrets(manifest.secret_envs)
    ledger = Ledger(ledger_path)
    try:
        bound = ledger.check_storage(manifest.batch, named)
        chosen = named or bound or storage_mod.normalize_url(storage_mod.DEFAULT_STORAGE)
        if run:
            storage_mod.open(chosen).check()  # before admitting or paying for anything
        admitted = ledger.admit(manifest, chosen, rates)
        keys = admitted.admitted_keys
        stats = RunStats()
        if run:
            job_ids = ledger.runnable_job_ids(batch=manifest.batch, keys=keys)
            stats = run_jobs(
                ledger,
                job_ids,
                concurrency=concurrency,
                reporter=reporter,
                budget=budget,
                checked=frozenset({manifest.batch}),
            )
        wanted = set(keys)
        rows = [r for r in ledger.status_rows(manifest.batch) if r["key"] in wanted]
        return RunResult(jobs=rows, admit=admitted, stats=stats, budget=budget)
    finally:
        ledger.close()


def manifest_rates(manifest: Any) -> RateCards:
    """Rate cards of the config file (AFC_CONFIG), with the manifest's own winning."""
    return RateCards.from_rates(load_config_rates(os.environ.get("AFC_CONFIG")) + manifest.rates)


def resume(
    *,
    ledger_path: str,
    batch: str | None,
    storage: str | None,
    concurrency: int,
    reporter: Reporter | None = None,
    max_spend: str | None = None,
    allow_unpriced: bool = False,
) -> RunResult:
    budget = Budget.parse(max_spend, allow_unpriced)
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
        from afc_cli.webhooks import check_secrets

        check_secrets(ledger, job_ids)
        chains = []
        for job_id in job_ids:
            job = ledger.job(job_id)
            chains.append((job["batch"], json.loads(job["request_json"])["chain"]))
        require_keys({entry["provider"] for _, chain in chains for entry in chain})
        if budget is not None:
            cards = batch_rates(ledger)
            budget.check_priced(chains, lambda b: cards.get(b) or RateCards())
        stats = run_jobs(ledger, job_ids, concurrency=concurrency, reporter=reporter, budget=budget)
        wanted = set(job_ids)
        rows = [r for r in ledger.status_rows(batch) if r["id"] in wanted]
        return RunResult(jobs=rows, stats=stats, budget=budget)
    finally:
        ledger.close()


def run_jobs(
    ledger: Ledger,
    job_ids: list[str],
    *,
    concurrency: int,
    reporter: Reporter | None = None,
    lease_s: float = LEASE_S,
    budget: Budget | None = None,
    checked: frozenset[str] = frozenset(),
) -> RunStats:
    """Run the given jobs to the end of what one run can do (and drain due webhooks).
    ``checked``: batches whose storage the caller has just checked (submit does, before
    admitting), not checked again: on S3 that is a round trip before the first call."""
    if not job_ids and not ledger.has_webhooks():
        return RunStats()
    if concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    reporter = reporter or Reporter()
    storages = {row["name"]: storage_mod.open(row["storage"]) for row in ledger.batches()}
    for name in ledger.batches_of(job_ids):
        if name not in checked:
            storages[name].check()  # no render is paid for that could not be stored
    limits = provider_limits(ledger)
    rates = batch_rates(ledger)
    run_id = str(uuid.uuid4())
    from afc_cli.providers import PROVIDERS
    from afc_cli.providers.http import size_pools

    size_pools(PROVIDERS, concurrency, limits)

    spool = Spool.beside(ledger.path)
    sweep_spool(ledger, spool)

    async def main() -> RunStats:
        helper = None
        if any(storage.local for storage in storages.values()):
            from afc_cli.offload import FileWorker

            helper = FileWorker()
            await helper.start()
        ctx = RunContext(
            ledger=ledger,
            spool=spool,
            storages=storages,
            rates=rates,
            slots=asyncio.Semaphore(concurrency),
            store_slots=asyncio.Semaphore(STORE_SLOTS),
            lease_s=lease_s,
            report=reporter.event,
            run_id=run_id,
            cap_micros=budget.cap_micros if budget else None,
            limits={name: ProviderLimit(**values) for name, values in limits.items()},
            **({"offload": helper.call, "quick": helper.quick} if helper else {}),
        )
        heartbeat = asyncio.create_task(_renew(ledger, lease_s))
        stop = asyncio.Event()
        outbox = None
        try:
            with ledger.grouped(asyncio.get_running_loop()):
                if ledger.has_webhooks():
                    from afc_cli.webhooks import run_beside

                    # beside the batch, never inside a job's steps
                    outbox = asyncio.create_task(run_beside(ledger, stop))
                await asyncio.gather(*(run_job(ctx, job_id) for job_id in job_ids))
                stop.set()
                if outbox is not None:
                    await outbox
            for provider in ctx.providers.values():
                await provider.close()
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
            if outbox is not None and not outbox.done():
                outbox.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await outbox
            if helper is not None:
                await helper.close()
        return RunStats(len(job_ids), ctx.budget_hit, ledger.run_spend(run_id))

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


def require_keys(providers: set[str]) -> None:
    """API keys come only from the environment; a missing one stops the run before any job
    starts (and nothing is written)."""
    from afc_cli.providers import missing_keys

    missing = missing_keys(providers)
    if missing:
        raise UsageError(
            "API key not set in the environment: "
            + ", ".join(missing)
            + " (afc reads provider keys only from the environment)"
        )


def provider_limits(ledger: Ledger) -> dict[str, dict[str, int | None]]:
    """Per-provider call limits for a run: the strictest any batch in the ledger sets."""
    merged: dict[str, dict[str, int | None]] = {}
    for row in ledger.batches():
        for name, values in json.loads(row["limits_json"] or "{}").items():
            current = merged.setdefault(name, {"concurrency": None, "per_minute": None})
            for key, value in values.items():
                if value is not None:
                    current[key] = value if current[key] is None else min(current[key], value)
    return merged


def batch_rates(ledger: Ledger) -> dict[str, RateCards]:
    """Each batch's rate cards, as recorded at its latest admission."""
    return {
        row["name"]: RateCards.from_json(json.loads(row["rates_json"] or "[]"))
        for row in ledger.batches()
    }
