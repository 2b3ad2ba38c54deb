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
