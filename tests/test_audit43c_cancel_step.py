"""Outside audit 43c: ``afc cancel --batch B`` while a run renders the batch.

The cancel reads its targets, then cancels them one transaction each: 18,784 jobs took 16 s
beside a run on SQLite, 37 s beside a worker on PostgreSQL. Each cancel wrote the job's step
as the target list had read it, so a job the run had rendered, spooled and stored meanwhile
was set back to its probe or render step: ``afc show`` said its output was "not stored yet
(its store step is not done)" with the object in storage, and four such jobs were said to
have "ended running" by the run. The cancel now keeps the step the job's row has as it is
cancelled (read under the row's lock, with its lease)."""

from __future__ import annotations

from conftest import jobs, manifest

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest


def test_a_cancel_keeps_the_step_a_run_reached_after_the_cancel_read_the_job(afc, ledger_url):
    path = afc.write_manifest(manifest(jobs(2)))
    ledger = Ledger(ledger_url)
    try:
        m = load_manifest(path)
        ledger.admit(m, "file:///tmp/x", RateCards())
        read = [ledger.job(j.job_id) for j in m.jobs]  # as the cancel's target list has them
        assert [job["step"] for job in read] == ["probe", "probe"]
        # a run takes the first on meanwhile: rendered, spooled, at its store step
        running = ledger.claim(read[0]["id"], 60)
        ledger.checkpoint(running, [("probe", {"found": None}), ("render", None)], "store")

        assert ledger.cancel(read[0], "cancelled with afc cancel")
        assert ledger.cancel(read[1], "cancelled with afc cancel")
        after = [ledger.job(job["id"]) for job in read]
        assert [(job["status"], job["step"]) for job in after] == [
            ("cancelled", "store"),
            ("cancelled", "probe"),
        ]
    finally:
        ledger.close()
