"""Outside audit 51a: an attempt's length when the wall clock steps during its call."""

from __future__ import annotations

import pytest
from conftest import jobs, manifest


@pytest.mark.parametrize("given_end", [False, True])
def test_a_call_during_which_the_clock_was_set_back_has_no_negative_length(
    afc, tmp_path, monkeypatch, given_end
):
    """NTP set the wall clock back an hour during a provider call (a host whose clock ran
    fast, corrected): the attempt's end was stamped by the wall clock, an hour before its
    start, and 'afc show' said the call lasted -3599.998s ('duration' in its --json). Its
    length is now measured on the clock no step moves, from the start the row was given."""
    from afc_cli.costs import RateCards
    from afc_cli.ledger import Ledger, core
    from afc_cli.manifest import load_manifest

    m = load_manifest(afc.write_manifest(manifest(jobs(1))))
    real = core._now
    ledger = Ledger(tmp_path / "afc.db")
    try:
        ledger.admit(m, "file:///tmp/x", RateCards())
        job = ledger.claim(m.jobs[0].job_id, 300)
        number = ledger.start_attempt(job, 0, "local", "m1", None, durable=False)
        monkeypatch.setattr(core, "_now", lambda: real() - 3600)  # set back an hour
        end = {"ended_at": core._now()} if given_end else {}
        ledger.end_attempt(
            job, number, chain_index=0, provider="local", model="m1", status="failed", **end
        )
        (row,) = ledger.attempts(job["id"])
    finally:
        ledger.close()
    assert 0 <= row["duration_s"] < 60, row["duration_s"]
    assert row["ended_at"] >= row["started_at"], row
