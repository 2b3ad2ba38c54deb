"""Outside audit 51a: a provider's ``concurrency`` across the ledger after the wall clock
jumped past a live run's lease."""

from __future__ import annotations

import pytest
from conftest import jobs, manifest

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger, ProviderBusy, core
from afc_cli.manifest import load_manifest


def test_a_wall_clock_jump_does_not_let_a_call_past_the_providers_concurrency(
    afc, tmp_path, monkeypatch
):
    """``limits: {local: {concurrency: 1}}``: one call of the provider at once across every
    afc process of the ledger. The calls counted were those of jobs whose lease had not run
    out by the ledger's clock, on SQLite the host's wall clock: stepped forward past the
    lease (NTP), a live run's call in flight counted no more, and a second process on the
    host started its call beside it, until the run renewed its lease (up to a third of
    AFC_LEASE_S later). A live run of this host holds its calls by its lease's monotonic
    expiry, as a claim judges it."""
    path = tmp_path / "afc.db"
    m = load_manifest(afc.write_manifest(manifest(jobs(2))))
    first = Ledger(path)
    try:
        first.admit(m, "file:///tmp/x", RateCards())
        job = first.claim(m.jobs[0].job_id, 300)
        assert first.start_attempt(job, 0, "local", "m1", None, durable=False, limit=(1, None))
    finally:
        first.close()
    real = core._now
    monkeypatch.setattr(core, "_now", lambda: real() + 3600)  # NTP steps an hour forward
    other = Ledger(path)  # another run of this host (this live process stands for it)
    try:
        job = other.claim(m.jobs[1].job_id, 300)
        with pytest.raises(ProviderBusy) as busy:
            other.start_attempt(job, 0, "local", "m1", None, durable=False, limit=(1, None))
        assert "1 call in flight" in str(busy.value)
    finally:
        other.close()
