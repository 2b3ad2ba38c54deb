"""Lease fences that no test noticed broken (audit 54a, mutation audit): a process renews
and keeps only the leases it holds. Each test names the mutant it kills; each runs on SQLite
and PostgreSQL."""

from __future__ import annotations

import pytest
from conftest import jobs, manifest

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest


@pytest.fixture
def two(afc, ledger_url):
    """Two processes on one ledger of two admitted jobs: ``ledger`` (this process) and
    ``other`` (another host's)."""
    path = afc.write_manifest(manifest(jobs(2)))
    ledger = Ledger(ledger_url)
    m = load_manifest(path)
    ledger.admit(m, "file:///tmp/x", RateCards())
    other = Ledger(ledger_url)
    other.owner = "host-b:4242:1"
    try:
        yield ledger, other, [j.job_id for j in m.jobs]
    finally:
        other.close()
        ledger.close()


def test_a_heartbeat_renews_only_its_own_runs_leases(two):
    """Mutant: ``renew_leases`` without ``lease_owner = ?``. Every live run's heartbeat then
    renewed every unfinished job's lease, a dead host's too: its jobs were never taken over
    while any other afc process ran on the ledger."""
    ledger, other, (a, b) = two
    dead = other.claim(a, -1.0)  # another host's job, its lease run out (the host is gone)
    assert dead is not None
    assert ledger.claim(b, 60) is not None
    ledger.renew_leases(60)
    assert ledger.job(a)["lease_expires"] == dead["lease_expires"]
    assert ledger.claim(a, 60) is not None, "the dead host's job is taken over"


def test_the_last_look_before_a_request_is_false_once_another_process_took_the_job(two):
    """Mutant: ``keep_lease`` without ``lease_owner = ?``. A run that stalled past its lease
    found a job another process had taken over still its own at the last look before its
    paid request (``pipeline._last_look``), sent it, and the job was paid for twice; the look
    also renewed the other process's lease."""
    ledger, other, (a, _) = two
    assert other.claim(a, -1.0) is not None
    taken = ledger.claim(a, 60)
    assert taken is not None
    assert other.keep_lease(a, 3600) is False
    row = ledger.job(a)
    assert (row["lease_owner"], row["lease_expires"]) == (ledger.owner, taken["lease_expires"])
    assert ledger.keep_lease(a, 60) is True
