"""Outside audit 51a: a live run of this host rendering an output key still holds it after
the wall clock jumped past its lease."""

from __future__ import annotations

import pytest
from conftest import jobs, manifest

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger, OutputBusy, core
from afc_cli.manifest import load_manifest


def test_a_wall_clock_jump_does_not_free_an_output_key_a_live_run_renders(
    afc, tmp_path, monkeypatch
):
    """Two batches whose output template leaves out {batch} share their keys in one storage:
    the first job to start an attempt holds its key until it stops running, and the other
    waits (OutputBusy), then looks in storage. The hold was judged by the lease's wall-clock
    expiry alone: after NTP stepped the clock forward past the lease (or a resume beside a
    run on a host whose clock was corrected), a second afc process on the host started its
    own paid render of the key while the live run's was in flight, one of the two refused
    at its store (OUTPUT_KEY_CONFLICT), paid for nothing. A claim and afc plan judge such a
    lease by its monotonic expiry on the run's own host (jobs.lease_mono); so does the
    key's hold now."""
    path = tmp_path / "afc.db"
    films = {}
    ledger = Ledger(path)
    try:
        for batch in ("v1", "v2"):
            data = manifest(jobs(1), batch=batch)
            data["defaults"]["output"] = "{key}.{ext}"
            m = load_manifest(afc.write_manifest(data, name=f"{batch}.yaml"))
            ledger.admit(m, "file:///tmp/x", RateCards())
            films[batch] = m.jobs[0].job_id
        first = ledger.claim(films["v1"], 300)  # this live process renders v1's shot-001
        assert ledger.start_attempt(first, 0, "local", "m1", None, durable=False) == 1
    finally:
        ledger.close()
    real = core._now
    monkeypatch.setattr(core, "_now", lambda: real() + 3600)  # NTP steps an hour forward
    other = Ledger(path)  # another run of this host (this process stands for it)
    try:
        job = other.claim(films["v2"], 300)
        assert job is not None
        with pytest.raises(OutputBusy) as busy:
            other.start_attempt(job, 0, "local", "m1", None, durable=False)
        assert (busy.value.batch, busy.value.key) == ("v1", "shot-001")
        assert other.attempts(job["id"]) == []
    finally:
        other.close()
