"""The pipeline in process: what holds a job, where its bytes wait, what decides its end."""

from __future__ import annotations

import asyncio
from typing import Any

from conftest import jobs, manifest

from afc_cli import storage as storage_mod
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest
from afc_cli.pipeline import RunContext, Slots, run_job
from afc_cli.run import manifest_rates
from afc_cli.spool import Spool
from afc_cli.storage.file import FileStorage


class OneJob:
    """One admitted job on the local provider with file:// storage, and a RunContext for it."""

    def __init__(self, afc, spec: list[dict[str, Any]] | None = None):
        self.manifest = load_manifest(afc.write_manifest(manifest(spec or jobs(1))))
        self.job_id = self.manifest.jobs[0].job_id
        self.url = f"file://{afc.cwd / 'out'}"
        self.ledger = Ledger(afc.cwd / "afc.db")
        self.ledger.admit(self.manifest, self.url, manifest_rates(self.manifest))
        self.spool = Spool.beside(self.ledger.path)

    def context(self, storage=None, **overrides: Any) -> RunContext:
        batch = self.manifest.batch
        return RunContext(
            ledger=self.ledger,
            spool=self.spool,
            storages={batch: storage or storage_mod.open(self.url)},
            rates={batch: manifest_rates(self.manifest)},
            slots=Slots(1),
            **overrides,
        )

    def run(self, main) -> Any:
        """asyncio.run(main()) under group commit; the ledger is closed afterwards."""

        async def grouped():
            with self.ledger.grouped(asyncio.get_running_loop()):
                return await main()

        try:
            return asyncio.run(grouped())
        finally:
            self.ledger.close()


def test_rendered_bytes_are_spooled_before_waiting_for_a_storage_slot(afc):
    """No storage slot is free: the render returns, its bytes go to the spool at once (on
    disk, not held in memory while uploads are slow), and the job waits there to store."""
    one = OneJob(afc)
    job_id = one.job_id

    async def main():
        ctx = one.context(store_slots=asyncio.Semaphore(0))
        task = asyncio.create_task(run_job(ctx, job_id))
        for _ in range(500):
            # the spool file lands before the checkpoint that records it: wait for both
            spooled = ctx.spool.path(job_id).exists()
            if (spooled and one.ledger.job(job_id)["step"] == "store") or task.done():
                break
            await asyncio.sleep(0.01)
        spooled_while_waiting = ctx.spool.path(job_id).exists() and not task.done()
        step = one.ledger.job(job_id)["step"]
        ctx.store_slots.release()
        return spooled_while_waiting, step, await task

    spooled_while_waiting, step, status = one.run(main)
    assert spooled_while_waiting and step == "store"
    assert status == "succeeded"


class _TruncatingStorage(FileStorage):
    """Stores, then loses half the object: what a faulty disk or a meddling process does."""

    def put_if_absent(self, key, source, meta, *, sync=True):
        super().put_if_absent(key, source, meta, sync=sync)
        obj = self.root / key
        data = obj.read_bytes()
        obj.unlink()  # the spool file stays whole (the object was a hard link to it)
        obj.write_bytes(data[: len(data) // 2])


def test_the_read_back_decides_not_the_write(afc):
    """A store that reported success but reads back wrong ends the job failed VERIFY_FAILED,
    with the paid attempt recorded, the store step on record and the spool file kept."""
    one = OneJob(afc)
    ledger, job_id = one.ledger, one.job_id

    async def main():
        status = await run_job(one.context(_TruncatingStorage(afc.cwd / "out")), job_id)
        steps = [s["step"] for s in ledger.steps(job_id)]
        return status, ledger.job(job_id), steps, ledger.attempts(job_id)

    status, job, steps, attempts = one.run(main)
    assert status == "failed" and job["error_code"] == "VERIFY_FAILED"
    assert "reads back" in job["error_message"] and "is kept" in job["error_message"]
    assert steps == ["probe", "render", "spool", "store"]
    assert [(a["status"], a["cost_micros"]) for a in attempts] == [("succeeded", 50_000)]
    assert one.spool.path(job_id).exists()


def test_big_outputs_are_spooled_here_not_sent_through_the_helper_pipe(afc, monkeypatch):
    """Small outputs cross to the file helper; one above OFFLOAD_SPOOL_BYTES (a video) is
    written from a thread of the run instead, never copied into a pipe."""
    import afc_cli.pipeline as pipeline

    def offloaded_calls(key: str) -> list[str]:
        one = OneJob(afc, [{"key": key, "prompt": key}])
        names: list[str] = []

        async def offload(fn, *args, **kwargs):
            names.append(getattr(fn, "__name__", repr(fn)))
            return await asyncio.to_thread(fn, *args, **kwargs)

        async def main():
            return await run_job(one.context(offload=offload), one.job_id)

        assert one.run(main) == "succeeded"
        return names

    assert "write" in offloaded_calls("small")
    monkeypatch.setattr(pipeline, "OFFLOAD_SPOOL_BYTES", 10)  # every PNG counts as big now
    names = offloaded_calls("big")
    assert "write" not in names and "store_and_verify" in names
