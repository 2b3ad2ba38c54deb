"""Outside audit 65d: ``afc queue stats`` read its figures at several moments: the counts by
status first, then the running and waiting jobs (to take those whose afc process is gone out
of ``in_flight`` and ``delayed``), then the dependents failed by a person's decision (out of
``stuck``). A commit between those reads (a run claiming a job, a review rejection failing
its dependents) was subtracted from counts that did not hold it: one look said ``in_flight``
0 beside ``process_gone`` 1 while a job was in flight, and the job counted ``queued`` too;
``stuck`` could go below 0. The figures are now read in one read transaction."""

from __future__ import annotations

import sqlite3

from conftest import jobs, manifest

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest
from afc_cli.ops import queue_stats


def test_figures_are_one_moment(afc, monkeypatch, tmp_path):
    path = str(tmp_path / "afc.db")
    ledger = Ledger(path)
    try:
        m = load_manifest(afc.write_manifest(manifest(jobs(2))))
        ledger.admit(m, "file:///tmp/x", RateCards())
        live, other = (job.job_id for job in m.jobs)
        with ledger.tx():  # one job in flight, held by this live process
            ledger.db.execute(
                "UPDATE jobs SET status = 'running', lease_owner = ?, lease_expires = ?,"
                " lease_mono = NULL WHERE id = ?",
                (ledger.owner, ledger.lease_clock() + 3600, live),
            )
    finally:
        ledger.close()

    def claim_then_die() -> None:
        # a run claims the queued job and is killed: its lease names a gone process
        conn = sqlite3.connect(path)
        with conn:
            conn.execute(
                "UPDATE jobs SET status = 'running', lease_owner = 'gone-host:1',"
                " lease_expires = 1, lease_mono = 1 WHERE id = ?",
                (other,),
            )
        conn.close()

    connect = sqlite3.connect
    done: list[bool] = []

    def traced(*args, **kwargs):
        conn = connect(*args, **kwargs)

        def seen(sql: str) -> None:
            # between the counts and the look at the held jobs' leases
            if "lease_owner" in sql and "status IN ('running', 'waiting')" in sql and not done:
                done.append(True)
                claim_then_die()

        conn.set_trace_callback(seen)
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced)
    stats, _ = queue_stats(path)
    assert done, "the look at the held jobs was not made"
    monkeypatch.setattr(sqlite3, "connect", connect)
    # the moment of the counts: one queued, one in flight, none gone
    assert (stats["queued"], stats["in_flight"], stats["process_gone"]) == (1, 1, 0), stats
    again, _ = queue_stats(path)  # the next look sees the commit, whole
    assert (again["queued"], again["in_flight"], again["process_gone"]) == (0, 1, 1), again
