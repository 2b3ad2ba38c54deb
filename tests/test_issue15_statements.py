"""The ledger writes per job of a fresh run, counted: a probe that finds nothing writes nothing
of its own (its step row and the job's move to render go with the attempt row), so a job
that renders once and succeeds is ten statements: claim 1, attempt 3, spool 3, finish 3."""

from __future__ import annotations

import re

from conftest import jobs, manifest

from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest
from afc_cli.run import manifest_rates, run_jobs

WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\b", re.IGNORECASE)


def test_a_fresh_job_is_ten_ledger_writes_and_its_steps_are_all_recorded(afc):
    n = 12
    path = afc.write_manifest(manifest(jobs(n)))
    m = load_manifest(path)
    ledger = Ledger(afc.cwd / "afc.db")
    try:
        ledger.admit(m, f"file://{afc.cwd}/out", manifest_rates(m))
        ids = ledger.runnable_job_ids(batch="b1")
        writes: list[str] = []
        ledger.db.conn.set_trace_callback(
            lambda sql: writes.append(sql) if WRITE.match(sql) else None
        )
        stats = run_jobs(ledger, ids, concurrency=4)
        ledger.db.conn.set_trace_callback(None)
        assert stats.finished == n
        per_job = [w for w in writes if "lease_expires = ? WHERE lease_owner" not in w]
        assert len(per_job) == 10 * n, sorted({w.split(" (")[0][:60] for w in per_job})
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
