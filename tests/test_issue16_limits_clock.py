"""Issue 16: shared ``per_minute`` limits on the ledger's clock. On PostgreSQL the minute is the
database server's, and so are the start times it counts (each host stamps its attempts with its
clock corrected by its measured offset to the server's), so hosts whose clocks disagree count
the same calls. A host's skewed clock is ``afc_cli.ledger.core._now`` moved while it opens the
ledger and starts its call; the database server's clock is the machine's."""

from __future__ import annotations

import pytest
from conftest import jobs, manifest

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger, ProviderBusy, core
from afc_cli.manifest import load_manifest


def _other(url: str, owner: str) -> Ledger:
    """The same ledger opened as a process on another host would (its own owner)."""
    other = Ledger(url)
    other.owner = owner
    return other


def test_per_minute_counts_a_slow_hosts_calls_on_the_servers_clock(afc, pg_url, monkeypatch):
    """Host A's clock is two minutes behind. With the hosts' clocks, A's call would be dated
    out of the minute and host B would start another: two calls in a minute of a provider
    that allows one. On the server's clock B is refused, and told to ask again within the
    minute."""
    path = afc.write_manifest(manifest(jobs(2)))
    m = load_manifest(path)
    real = core._now
    setup = Ledger(pg_url)
    setup.admit(m, "file:///tmp/x", RateCards())
    setup.close()

    monkeypatch.setattr(core, "_now", lambda: real() - 120)
    host_a = _other(pg_url, "host-a:1:1")
    try:
        a = host_a.claim(m.jobs[0].job_id, 60)
        assert host_a.start_attempt(a, 0, "local", "m1", None, durable=False, limit=(None, 1)) == 1
        started = host_a.attempts(a["id"])[0]["started_at"]
        assert abs(started - host_a.lease_clock()) < 5, "stamped on the server's clock"
    finally:
        host_a.close()
    monkeypatch.setattr(core, "_now", real)

    host_b = _other(pg_url, "host-b:1:1")
    try:
        b = host_b.claim(m.jobs[1].job_id, 60)
        with pytest.raises(ProviderBusy) as busy:
            host_b.start_attempt(b, 0, "local", "m1", None, durable=False, limit=(None, 1))
        assert "1 call started in the last minute" in busy.value.reason  # not "1 calls"
        assert 55 <= busy.value.retry_after <= 60.5
        assert host_b.attempts(b["id"]) == []
    finally:
        host_b.close()


def test_per_minute_is_not_held_full_by_a_fast_hosts_calls(afc, pg_url, monkeypatch):
    """Host A's clock is two minutes ahead: with the hosts' clocks its call would keep the
    minute full for three minutes (B told to wait 180 s). On the server's clock, at most one
    minute."""
    path = afc.write_manifest(manifest(jobs(2)))
    m = load_manifest(path)
    real = core._now
    setup = Ledger(pg_url)
    setup.admit(m, "file:///tmp/x", RateCards())
    setup.close()

    monkeypatch.setattr(core, "_now", lambda: real() + 120)
    host_a = _other(pg_url, "host-a:1:1")
    try:
        a = host_a.claim(m.jobs[0].job_id, 60)
        assert host_a.start_attempt(a, 0, "local", "m1", None, durable=False, limit=(None, 1)) == 1
        # its end, reported in its own clock, is stored on the server's: the duration holds
        host_a.end_attempt(a, 1, chain_index=0, provider="local", model="m1",
                           status="failed", started_at=real() + 120, ended_at=real() + 121.5)  # fmt: skip
        (attempt,) = host_a.attempts(a["id"])
        assert abs(attempt["ended_at"] - host_a.lease_clock()) < 5
        assert 1.0 < attempt["duration_s"] < 2.5
    finally:
        host_a.close()
    monkeypatch.setattr(core, "_now", real)

    host_b = _other(pg_url, "host-b:1:1")
    try:
        b = host_b.claim(m.jobs[1].job_id, 60)
        with pytest.raises(ProviderBusy) as busy:
            host_b.start_attempt(b, 0, "local", "m1", None, durable=False, limit=(None, 1))
        assert busy.value.retry_after <= 60.5
    finally:
        host_b.close()


def test_per_minute_on_sqlite_counts_the_last_minute(afc, tmp_path):
    path = afc.write_manifest(manifest(jobs(3)))
    m = load_manifest(path)
    ledger = Ledger(str(tmp_path / "afc.db"))
    try:
        ledger.admit(m, "file:///tmp/x", RateCards())
        assert ledger.clock_offset() == 0.0
        a, b, c = (ledger.claim(spec.job_id, 60) for spec in m.jobs)
        assert ledger.start_attempt(a, 0, "local", "m1", None, durable=False, limit=(None, 2))
        assert ledger.start_attempt(b, 0, "local", "m1", None, durable=False, limit=(None, 2))
        with pytest.raises(ProviderBusy):
            ledger.start_attempt(c, 0, "local", "m1", None, durable=False, limit=(None, 2))
        # a minute later (the two calls' stamps moved back), the window is free again
        with ledger.tx():
            ledger.db.execute("UPDATE attempts SET started_at = started_at - 61")
        assert ledger.start_attempt(c, 0, "local", "m1", None, durable=False, limit=(None, 2))
    finally:
        ledger.close()
