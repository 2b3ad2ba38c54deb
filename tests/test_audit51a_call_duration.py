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


def test_a_start_that_waited_for_a_lock_keeps_the_call_s_real_end(afc, tmp_path, monkeypatch):
    """The attempt's start is read as its row's transaction begins, and its row may wait for
    a lock first (a workers' shared budget's, held by a sibling stopped by SIGSTOP for 8 s):
    the length on the clock no step moves was counted from after that wait, and the call's
    end, measured as that start plus that length, was 8 s early. The attempt's interval then
    ended before its request was sent: a paid request with no attempt row around it (make
    chaos-postgres seed 123). Both readings of the start are now taken at one moment."""
    from afc_cli.costs import RateCards
    from afc_cli.ledger import Ledger, core
    from afc_cli.manifest import load_manifest

    clock = [1_000_000.0]  # the wall clock and the boot-time clock, stepping together
    monkeypatch.setattr(core, "_now", lambda: clock[0])
    monkeypatch.setattr(core, "awake_clock", lambda: clock[0] - 900_000.0)
    m = load_manifest(afc.write_manifest(manifest(jobs(1))))
    ledger = Ledger(tmp_path / "afc.db")
    try:
        ledger.admit(m, "file:///tmp/x", RateCards())
        job = ledger.claim(m.jobs[0].job_id, 300)
        waited = ledger._check_output

        def slow(job):  # the row's transaction waits 8 s for a lock
            clock[0] += 8.0
            return waited(job)

        monkeypatch.setattr(ledger, "_check_output", slow)
        number = ledger.start_attempt(job, 0, "local", "m1", None, durable=False)
        clock[0] += 0.5  # the call
        ledger.end_attempt(
            job,
            number,
            chain_index=0,
            provider="local",
            model="m1",
            status="failed",
            ended_at=clock[0],
        )
        (row,) = ledger.attempts(job["id"])
    finally:
        ledger.close()
    assert row["ended_at"] == pytest.approx(clock[0]), row
    assert row["duration_s"] == pytest.approx(8.5), row
