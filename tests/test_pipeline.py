"""The run loop's slots, in process: what holds a job, and where its bytes wait."""

from __future__ import annotations

import asyncio

from conftest import jobs, manifest

from afc_cli import storage as storage_mod
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest
from afc_cli.pipeline import RunContext, run_job
from afc_cli.run import manifest_rates
from afc_cli.spool import Spool
from afc_cli.storage.file import FileStorage


def test_rendered_bytes_are_spooled_before_waiting_for_a_storage_slot(afc):
    """No storage slot is free: the render returns, its bytes go to the spool at once (on
    disk, not held in memory while uploads are slow), and the job waits there to store."""
    m = load_manifest(afc.write_manifest(manifest(jobs(1))))
    url = f"file://{afc.cwd / 'out'}"
    ledger = Ledger(afc.cwd / "afc.db")
    ledger.admit(m, url, manifest_rates(m))
    job_id = m.jobs[0].job_id

    async def main():
        ctx = RunContext(
            ledger=ledger,
            spool=Spool.beside(ledger.path),
            storages={m.batch: storage_mod.open(url)},
            rates={m.batch: manifest_rates(m)},
            slots=asyncio.Semaphore(1),
            store_slots=asyncio.Semaphore(0),
        )
        with ledger.grouped(asyncio.get_running_loop()):
            task = asyncio.create_task(run_job(ctx, job_id))
            for _ in range(500):
                if ctx.spool.path(job_id).exists() or task.done():
                    break
                await asyncio.sleep(0.01)
            spooled_while_waiting = ctx.spool.path(job_id).exists() and not task.done()
            step = ledger.job(job_id)["step"]
            ctx.store_slots.release()
            return spooled_while_waiting, step, await task

    try:
        spooled_while_waiting, step, status = asyncio.run(main())
    finally:
        ledger.close()
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
    m = load_manifest(afc.write_manifest(manifest(jobs(1))))
    url = f"file://{afc.cwd / 'out'}"
    ledger = Ledger(afc.cwd / "afc.db")
    ledger.admit(m, url, manifest_rates(m))
    job_id = m.jobs[0].job_id
    spool = Spool.beside(ledger.path)

    async def main():
        ctx = RunContext(
            ledger=ledger,
            spool=spool,
            storages={m.batch: _TruncatingStorage(afc.cwd / "out")},
            rates={m.batch: manifest_rates(m)},
            slots=asyncio.Semaphore(1),
        )
        with ledger.grouped(asyncio.get_running_loop()):
            return await run_job(ctx, job_id)

    try:
        status = asyncio.run(main())
        job = ledger.job(job_id)
        steps = [s["step"] for s in ledger.steps(job_id)]
        attempts = ledger.attempts(job_id)
    finally:
        ledger.close()
    assert status == "failed" and job["error_code"] == "VERIFY_FAILED"
    assert "reads back" in job["error_message"] and "is kept" in job["error_message"]
    assert steps == ["probe", "render", "spool", "store"]
    assert [(a["status"], a["cost_micros"]) for a in attempts] == [("succeeded", 50_000)]
    assert spool.path(job_id).exists()


def test_big_outputs_are_spooled_here_not_sent_through_the_helper_pipe(afc, monkeypatch):
    """Small outputs cross to the file helper; one above OFFLOAD_SPOOL_BYTES (a video) is
    written from a thread of the run instead, never copied into a pipe."""
    import afc_cli.pipeline as pipeline

    def run_one(key: str) -> list[str]:
        m = load_manifest(afc.write_manifest(manifest([{"key": key, "prompt": key}])))
        url = f"file://{afc.cwd / 'out'}"
        ledger = Ledger(afc.cwd / "afc.db")
        ledger.admit(m, url, manifest_rates(m))
        offloaded: list[str] = []

        async def offload(fn, *args, **kwargs):
            offloaded.append(getattr(fn, "__name__", repr(fn)))
            return await asyncio.to_thread(fn, *args, **kwargs)

        async def main():
            ctx = RunContext(
                ledger=ledger,
                spool=Spool.beside(ledger.path),
                storages={m.batch: storage_mod.open(url)},
                rates={m.batch: manifest_rates(m)},
                slots=asyncio.Semaphore(1),
                offload=offload,
            )
            with ledger.grouped(asyncio.get_running_loop()):
                assert await run_job(ctx, m.jobs[0].job_id) == "succeeded"

        try:
            asyncio.run(main())
        finally:
            ledger.close()
        return offloaded

    assert "write" in run_one("small")
    monkeypatch.setattr(pipeline, "OFFLOAD_SPOOL_BYTES", 10)  # every PNG counts as big now
    offloaded = run_one("big")
    assert "write" not in offloaded and "store_and_verify" in offloaded
