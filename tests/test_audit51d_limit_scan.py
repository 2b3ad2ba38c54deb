"""Outside audit 51d: a provider's ``concurrency`` across the ledger (``Ledger._check_limit``)
after 66021ba counted a live run's calls by their monotonic expiry."""

from __future__ import annotations

import pytest
from conftest import jobs, manifest

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger, ProviderBusy, core
from afc_cli.manifest import load_manifest
from afc_cli.owner import host_id

DEAD = f"{host_id()}:999999999:1"  # a process of this host that is gone


def _set(ledger: Ledger, sql: str, params: tuple) -> None:
    with ledger.tx():
        ledger.db.execute(sql, params)


def test_a_dead_process_s_call_does_not_hide_a_live_run_s_call_past_a_clock_step(
    afc, tmp_path, monkeypatch
):
    """``concurrency: 1``. A process of this host died in a call, its job's lease still
    running by the wall clock; a live run's call is in flight, its lease run out by the wall
    clock alone (NTP stepped it forward). The live run's call was counted only when the
    calls of live leases were under the limit: the dead one's filled it, was then counted
    out (its process is gone), and a second call started beside the live one."""
    path = tmp_path / "afc.db"
    m = load_manifest(afc.write_manifest(manifest(jobs(3))))
    first = Ledger(path)
    try:
        first.admit(m, "file:///tmp/x", RateCards())
        for job_id in (m.jobs[0].job_id, m.jobs[1].job_id):
            job = first.claim(job_id, 300)
            assert first.start_attempt(job, 0, "local", "m1", None, durable=False)
        dead_job = m.jobs[0].job_id
        _set(
            first,
            "UPDATE jobs SET lease_owner = ?, lease_expires = 9e18, lease_mono = NULL WHERE id = ?",
            (DEAD, dead_job),
        )
        _set(first, "UPDATE attempts SET owner = ? WHERE job_id = ?", (DEAD, dead_job))
    finally:
        first.close()
    real = core._now
    monkeypatch.setattr(core, "_now", lambda: real() + 3600)  # NTP steps an hour forward
    other = Ledger(path)  # another run of this host (this live process stands for the first)
    try:
        job = other.claim(m.jobs[2].job_id, 300)
        with pytest.raises(ProviderBusy) as busy:
            other.start_attempt(job, 0, "local", "m1", None, durable=False, limit=(1, None))
        assert "1 call in flight" in str(busy.value)
    finally:
        other.close()


def test_the_calls_in_flight_are_read_once(afc, tmp_path):
    """No index picks the ``started`` attempts out: on SQLite each read of them scans every
    attempt of the ledger under its write lock (33 ms at 300,000 attempts), and the read
    66021ba added for the calls held by their monotonic expiry made each start of a call
    under ``limits`` scan them twice."""
    path = tmp_path / "afc.db"
    m = load_manifest(afc.write_manifest(manifest(jobs(2))))
    ledger = Ledger(path)
    try:
        ledger.admit(m, "file:///tmp/x", RateCards())
        job = ledger.claim(m.jobs[0].job_id, 300)
        assert ledger.start_attempt(job, 0, "local", "m1", None, durable=False)
        reads: list[str] = []
        ledger.db.conn.set_trace_callback(
            lambda sql: reads.append(sql) if "FROM attempts" in sql else None
        )
        with ledger.tx():
            ledger._check_limit("local", 4, None)
        ledger.db.conn.set_trace_callback(None)
        assert len(reads) == 1, reads
    finally:
        ledger.close()
