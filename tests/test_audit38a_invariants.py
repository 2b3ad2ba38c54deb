"""docs/ledger.md "Invariants" 2 and 12, which no test pinned: a stale copy of a job never
starts a second attempt under the same number, and an admission that fails in a later chunk
leaves nothing of the earlier chunks behind. On both engines (``ledger_url``)."""

from __future__ import annotations

import pytest
from conftest import jobs, manifest

import afc_cli.ledger.core as core
from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest


def test_a_stale_job_never_starts_a_second_attempt_with_the_same_number(afc, ledger_url):
    """Invariant 2: ``start_attempt`` moves ``jobs.attempts`` only from the value it read."""
    path = afc.write_manifest(manifest(jobs(1)))
    ledger = Ledger(ledger_url)
    try:
        m = load_manifest(path)
        ledger.admit(m, "file:///tmp/x", RateCards())
        job = ledger.claim(m.jobs[0].job_id, 60)
        stale = dict(job)  # what a second task of the same run read before the first started
        assert ledger.start_attempt(job, 0, "local", "m1", None, durable=True) == 1
        assert ledger.start_attempt(stale, 0, "local", "m1", None, durable=True) is None
        assert [a["number"] for a in ledger.attempts(job["id"])] == [1]
        assert ledger.job(job["id"])["attempts"] == 1
        # from the row as it is now, the next attempt is numbered 2
        assert ledger.start_attempt(job, 0, "local", "m1", None, durable=True) == 2
    finally:
        ledger.close()


def test_an_admission_that_fails_in_a_later_chunk_admits_nothing(afc, ledger_url, monkeypatch):
    """Invariant 12: the chunks of one admission share its one transaction."""
    path = afc.write_manifest(manifest(jobs(5)))
    ledger = Ledger(ledger_url)
    try:
        m = load_manifest(path)
        monkeypatch.setattr(core, "ADMIT_CHUNK", 2)
        real = core.Ledger._admit_chunk
        seen = []

        def failing(self, *args, **kwargs):
            seen.append(1)
            if len(seen) == 3:  # two chunks written, the third fails (a full disk, say)
                raise RuntimeError("disk full")
            return real(self, *args, **kwargs)

        monkeypatch.setattr(core.Ledger, "_admit_chunk", failing)
        with pytest.raises(RuntimeError, match="disk full"):
            ledger.admit(m, "file:///tmp/x", RateCards())
        assert len(seen) == 3
        assert ledger.db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == 0
        assert ledger.db.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 0
        assert ledger.batch(m.batch) is None
    finally:
        ledger.close()
