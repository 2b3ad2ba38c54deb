"""``afc plan`` on a PostgreSQL ledger reads a job's lease by the database's clock, as the
submit it plans does (outside audit 27c): it compared the lease's expiry, written on the
server's clock, with this host's own, so on a host whose clock was ahead of the server's by
more than the lease had left, a job another host's live worker held looked free, and the plan
said a changed review gate would take effect where the submit keeps it ('a run holds the
job'); on a host behind, the other way round."""

from __future__ import annotations

import time

import psycopg
from conftest import jobs, manifest

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest
from afc_cli.plan import plan


def test_a_plan_on_a_host_whose_clock_is_ahead_sees_another_hosts_lease(afc, pg_url, monkeypatch):
    first = afc.write_manifest(manifest(jobs(1)), name="v1.yaml")
    ledger = Ledger(pg_url)
    ledger.admit(load_manifest(first), f"file://{afc.cwd}/out", RateCards())
    ledger.close()
    with psycopg.connect(pg_url) as conn:  # another host's worker holds it for 2 minutes more
        conn.execute(
            "UPDATE jobs SET lease_owner = 'render-02:4242:777',"
            " lease_expires = EXTRACT(EPOCH FROM clock_timestamp()) + 120"
        )
    reviewed = manifest(jobs(1))
    reviewed["defaults"]["review"] = True
    second = afc.write_manifest(reviewed, name="v2.yaml")

    def planned() -> dict:
        return plan(str(second), ledger_path=pg_url, storage=f"file://{afc.cwd}/out")

    kept = planned()["gates_kept"]
    assert [k["why"] for k in kept] == ["a run holds the job"], kept
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 3600)  # this host's clock, an hour on
    assert planned()["gates_kept"] == kept
