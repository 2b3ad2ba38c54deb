"""The ledger writes per job of a fresh run, counted: a probe that finds nothing writes nothing
of its own (its step row and the job's move to render go with the attempt row), so a job
that renders once and succeeds is eleven statements: claim 1, attempt 3, its known cost 1
(written on the attempt before its spool file: a crash after the file leaves the adopted
attempt at its cost), spool 3, finish 3."""

from __future__ import annotations

import re

from conftest import jobs, manifest

from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest
from afc_cli.run import manifest_rates, run_jobs

WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\b", re.IGNORECASE)


def test_a_fresh_job_is_eleven_ledger_writes_and_its_steps_are_all_recorded(afc):
    n = 12
    path = afc.write_manifest(manifest(jobs(n)))
    m = load_manifest(path)
    ledger = Ledger(afc.cwd / "afc.db")
    try:
        ledger.admit(m, f"file://{afc.cwd}/out", manifest_rates(m))
        ids = ledger.runnable_job_ids(batch="b1")
        traced: list[str] = []
        ledger.db.conn.set_trace_callback(traced.append)
        stats = run_jobs(ledger, ids, concurrency=4)
        ledger.db.conn.set_trace_callback(None)
        # a trigger's program (m019's run_spend, in the statement's own transaction) is traced
        # as its statement's text again (Python's callback gives the statement's expanded SQL):
        # counted once, as afc sent it (each statement's text is its own: ids and times)
        writes = [
            sql
            for i, sql in enumerate(traced)
            if WRITE.match(sql) and (i == 0 or traced[i - 1] != sql)
        ]
        assert stats.finished == n
        # a run's own writes: lease renewals, the batch's S3 endpoint recorded once (this
        # admission, through Ledger.admit, named none: Ledger.hold_endpoint), and its storage
        # folder's mark recorded once (run.hold_folder)
        endpoint = [w for w in writes if w.startswith("UPDATE batches SET storage_endpoint")]
        assert len(endpoint) <= 1, endpoint
        marked = [w for w in writes if w.startswith("UPDATE batches SET storage_mark")]
        assert len(marked) == 1, marked
        endpoint += marked
        per_job = [
            w
            for w in writes
            if "lease_expires = ? WHERE lease_owner" not in w and w not in endpoint
        ]
        assert len(per_job) == 11 * n, sorted({w.split(" (")[0][:60] for w in per_job})
        for job_id in ids:
            steps = ledger.steps(job_id)
            assert [s["step"] for s in steps] == [
                "probe",
                "render",
                "spool",
                "store",
                "verify",
                "finish",
            ]
            times = [s["completed_at"] for s in steps]
            assert times == sorted(times)
            assert ledger.job(job_id)["status"] == "succeeded"
    finally:
        ledger.close()


def test_a_wide_run_writes_at_most_spool_slots_spool_files_at_once(afc, monkeypatch):
    """At 200 wide, every job keeps its render slot until it holds a spool slot (one per
    render slot), but at most ``pipeline.SPOOL_SLOTS`` of them write their spool files at once:
    200 writes queued together in the file helper held the next wave's probes behind them
    (1,000 x 1 s calls at 500 wide: 2.84-3.14 s against 2.71-2.85 s with 64 writers)."""
    import asyncio

    from afc_cli import pipeline

    n, width = 300, 200
    path = afc.write_manifest(manifest(jobs(n)))
    m = load_manifest(path)
    ledger = Ledger(afc.cwd / "afc.db")
    writing, most = 0, 0
    real = pipeline.STEPS["spool"]

    async def counted(ctx, job):
        nonlocal writing, most
        writing += 1
        most = max(most, writing)
        try:
            await asyncio.sleep(0.01)  # every job of the wave reaches its spool step meanwhile
            return await real(ctx, job)
        finally:
            writing -= 1

    monkeypatch.setitem(pipeline.STEPS, "spool", counted)
    try:
        ledger.admit(m, f"file://{afc.cwd}/out", manifest_rates(m))
        stats = run_jobs(ledger, ledger.runnable_job_ids(batch="b1"), concurrency=width)
        assert stats.finished == n
        assert most == pipeline.SPOOL_SLOTS, most
    finally:
        ledger.close()
