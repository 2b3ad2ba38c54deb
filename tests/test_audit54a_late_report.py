"""A late report of an attempt by a process that no longer owns it (audit 54a, mutation
audit): ``Ledger.report_attempt`` writes an outcome only while the row is ``started`` and
the reporter is its owner, and replaces a known cost only for its owner. Without the owner
clauses no test failed: a stalled process whose job and request another process had taken
over to poll ended the attempt ``failed`` under the poller, whose success then wrote nothing
(a paid, stored render counted as failed spend), and a late figure replaced the poller's
known cost. Every test runs on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from conftest import jobs, manifest

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest

MODEL = "black-forest-labs/flux-1.1-pro"
COMMON = {"chain_index": 0, "provider": "replicate", "model": MODEL}


@pytest.fixture
def taken_over(afc, ledger_url):
    """A job whose replicate request a stalled process (another host) submitted, its lease
    run out, taken over by ``ledger``'s process, which reopened the attempt to poll it."""
    path = afc.write_manifest(manifest(jobs(1)))
    ledger = Ledger(ledger_url)
    (spec,) = load_manifest(path).jobs
    ledger.admit(load_manifest(path), "file:///tmp/x", RateCards())
    stalled = Ledger(ledger_url)
    stalled.owner = "host-b:4242:1"
    try:
        job = stalled.claim(spec.job_id, -1.0)  # its lease already run out
        assert stalled.start_attempt(job, 0, "replicate", MODEL, None, durable=False) == 1
        stalled.record_request_id(job, 1, "replicate", "pred-1")
        mine = ledger.claim(spec.job_id, 60)  # the takeover: unknown, then reopened to poll
        (attempt,) = ledger.attempts(spec.job_id)
        assert attempt["status"] == "unknown" and ledger.reopen_attempt(mine, attempt)
        yield ledger, stalled, job, mine
    finally:
        stalled.close()
        ledger.close()


def test_a_stalled_owners_late_failure_does_not_end_the_attempt_another_process_polls(
    taken_over,
):
    ledger, stalled, old, mine = taken_over
    # the stalled process wakes and reports its call timed out, at a cost it read
    stalled.end_attempt(
        old,
        1,
        **COMMON,
        status="failed",
        error_class="timeout",
        cost_micros=55_000,
        cost_source="derived",
    )
    (row,) = ledger.attempts(mine["id"])
    assert row["status"] == "started", "a late report of another owner ended the attempt"
    assert row["cost_micros"] == 55_000  # a cost where none was known is kept (documented)

    # the poller's answer: the render succeeded, at the cost it was billed
    ledger.end_attempt(
        mine, 1, **COMMON, status="succeeded", cost_micros=40_000, cost_source="derived"
    )
    (row,) = ledger.attempts(mine["id"])
    assert (row["status"], row["error_class"], row["owner"]) == ("succeeded", None, ledger.owner)
    assert row["cost_micros"] == 40_000


def test_a_stalled_owners_late_cost_does_not_replace_the_pollers_known_one(taken_over):
    ledger, stalled, old, mine = taken_over
    ledger.end_attempt(
        mine, 1, **COMMON, status="succeeded", cost_micros=40_000, cost_source="derived"
    )
    stalled.end_attempt(
        old,
        1,
        **COMMON,
        status="failed",
        error_class="timeout",
        cost_micros=99_000,
        cost_source="quoted",
        usage={"predict_time": 90},
    )
    (row,) = ledger.attempts(mine["id"])
    assert (row["status"], row["cost_micros"], row["cost_source"]) == (
        "succeeded",
        40_000,
        "derived",
    )


def test_a_later_report_keeps_the_request_id_committed_at_submit(taken_over):
    """The id committed as the submit returned is what a resumed run polls; a report that
    names another id (a provider's answer carrying a different one) does not replace it."""
    ledger, _, _, mine = taken_over
    ledger.end_attempt(
        mine,
        1,
        **COMMON,
        status="succeeded",
        provider_request_id="pred-2",
        cost_micros=40_000,
        cost_source="derived",
    )
    (row,) = ledger.attempts(mine["id"])
    assert row["provider_request_id"] == "pred-1"
