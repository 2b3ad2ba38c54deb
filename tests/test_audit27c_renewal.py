"""A run whose lease renewal fails stops as at any failed ledger write (outside audit 27c).

The renewal task (run._renew) died with its first error and said nothing: the run went on
for as long as its jobs did (a worker's fed loop, for hours) with its leases no longer
renewed, so once they ran out another afc (a second worker on the host, a cron'd resume, a
worker elsewhere) took over jobs it was still working on and paid for them again, and the
error came out only at the loop's end, as a raw database error."""

from __future__ import annotations

import sqlite3

import pytest
from conftest import jobs, manifest

from afc_cli.costs import RateCards
from afc_cli.errors import LedgerWriteError
from afc_cli.ledger import Ledger
from afc_cli.ledger.sqlite import SqliteLedger
from afc_cli.manifest import load_manifest
from afc_cli.worker import work


def test_a_failed_renewal_stops_the_worker_before_it_starts_another_call(afc, monkeypatch):
    path = afc.write_manifest(manifest(jobs(2, latency_s=1.5)))
    url = str(afc.cwd / "afc.db")
    ledger = Ledger(url)
    m = load_manifest(path)
    ledger.admit(m, f"file://{afc.cwd}/out", RateCards())
    ledger.close()
    real = SqliteLedger.renew_leases
    renewals: list[str] = []

    def full_once(self, lease_s: float) -> None:
        renewals.append("tried")
        if len(renewals) == 1:  # the disk was full for a moment
            raise sqlite3.OperationalError("database or disk is full")
        real(self, lease_s)

    monkeypatch.setattr(SqliteLedger, "renew_leases", full_once)
    monkeypatch.setenv("AFC_LEASE_S", "3")  # renewed every second
    monkeypatch.chdir(afc.cwd)
    with pytest.raises(LedgerWriteError) as raised:
        work(ledger_path=url, concurrency=1, claim=2, grace_s=10, until_idle=True)
    assert "full" in str(raised.value), raised.value
    ledger = Ledger(url)
    try:
        first, second = (ledger.job(job.job_id) for job in m.jobs)
        # the call in flight at the failure finished, recorded at its cost
        assert first["status"] == "succeeded"
        assert [a["status"] for a in ledger.attempts(first["id"])] == ["succeeded"]
        # no new call under leases no longer renewed, and nothing left held
        assert ledger.attempts(second["id"]) == [], "a call started after the renewal failed"
        assert (second["status"], second["lease_owner"]) == ("queued", None)
    finally:
        ledger.close()
