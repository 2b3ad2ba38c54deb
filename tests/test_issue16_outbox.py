"""Issue 16: the webhook outbox on a ledger shared by several processes (as on several hosts).
The ledger's operations, on both backends where the promise is the same (``ledger_url``), on
PostgreSQL where it is PostgreSQL's (row locks skipped, the server's clock against a skewed
host's)."""

from __future__ import annotations

import pytest
from conftest import jobs, manifest

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger, core
from afc_cli.manifest import load_manifest

SECRET_ENV = "HOOK_SECRET"


def _ended(afc, url: str, monkeypatch) -> Ledger:
    """A ledger whose five jobs have ended, so five deliveries are pending."""
    monkeypatch.setenv(SECRET_ENV, "whsec_" + "A" * 32)
    path = afc.write_manifest(
        manifest(
            jobs(5),
            webhook={"url": "http://127.0.0.1:9/h", "secret_env": SECRET_ENV, "timeout_s": 2},
        )
    )
    ledger = Ledger(url)
    m = load_manifest(path)
    ledger.admit(m, "file:///tmp/x", RateCards())
    for spec in m.jobs:
        job = ledger.claim(spec.job_id, 60)
        assert ledger.finish(job, "succeeded", step="finish")
    return ledger


@pytest.fixture
def outbox(afc, ledger_url, monkeypatch):
    ledger = _ended(afc, ledger_url, monkeypatch)
    yield ledger, ledger_url
    ledger.close()


def _other(url: str, owner: str) -> Ledger:
    """The same ledger opened as another process on another host would (its own owner)."""
    other = Ledger(url)
    other.owner = owner
    return other


def test_deliveries_are_claimed_in_batches_once_each(outbox):
    ledger, url = outbox
    other = _other(url, "host-b:1:1")
    try:
        first = ledger.claim_deliveries(3)
        second = other.claim_deliveries(10)
        assert len(first) == 3 and len(second) == 2
        assert {r["id"] for r in first}.isdisjoint(r["id"] for r in second)
        assert {r["lease_owner"] for r in first} == {ledger.owner}
        assert {r["lease_owner"] for r in second} == {"host-b:1:1"}
        assert ledger.claim_deliveries(10) == [] and other.claim_deliveries(10) == []
        # a lease runs on the ledger's clock: the row's timeout plus the margin asked
        now = ledger.lease_clock()
        assert all(abs(r["lease_expires"] - (now + 2 + 120)) < 5 for r in first)
    finally:
        other.close()


def test_a_lost_lease_never_overwrites_the_new_owners_outcome(outbox):
    ledger, url = outbox
    other = _other(url, "host-b:1:1")
    try:
        (row,) = ledger.claim_deliveries(1)
        # our lease lapses (a stalled process): another process takes the row over
        with ledger.tx():
            ledger.db.execute(
                "UPDATE deliveries SET lease_expires = ? WHERE id = ?",
                (ledger.lease_clock() - 1, row["id"]),
            )
        assert [r["id"] for r in other.claim_deliveries(10)][0] == row["id"]
        # the first process may not post it any more, nor write an outcome for it
        assert ledger.hold_delivery(row["id"]) is None
        assert ledger.delivery_outcome(row["id"], "dead", 400, "HTTP 400", 1.0) is False
        assert ledger.delivery_retry(row["id"], 500, "HTTP 500", 5.0) is False
        assert ledger.release_delivery(row["id"]) is False
        held = other.hold_delivery(row["id"])
        assert held is not None and held["lease_owner"] == "host-b:1:1"
        assert other.delivery_outcome(row["id"], "delivered", 200, None, 2.0) is True
        stored = ledger.delivery(row["id"])
        assert (stored["status"], stored["last_status"], stored["attempts"]) == (
            "delivered",
            200,
            1,
        )
        assert stored["lease_owner"] is None
        # a delivered row is no one's to hold any more
        assert other.hold_delivery(row["id"]) is None
    finally:
        other.close()


def test_a_held_row_whose_lease_lapsed_unclaimed_is_still_ours(outbox):
    ledger, _ = outbox
    (row,) = ledger.claim_deliveries(1)
    with ledger.tx():
        ledger.db.execute("UPDATE deliveries SET lease_expires = 0 WHERE id = ?", (row["id"],))
    held = ledger.hold_delivery(row["id"], 5.0)
    assert held is not None and held["lease_expires"] >= ledger.lease_clock() + 2 + 5 - 1


def test_a_retry_is_scheduled_on_the_ledgers_clock_after_the_pass(outbox):
    ledger, _ = outbox
    began = ledger.lease_clock()
    rows = ledger.claim_deliveries(10, due_before=began)
    assert len(rows) == 5
    assert ledger.delivery_retry(rows[0]["id"], 503, "HTTP 503", 0.0) is True
    assert ledger.release_delivery(rows[1]["id"], "HOOK_SECRET is not set; not sent") is True
    assert ledger.release_delivery(rows[2]["id"]) is True
    # the retried row and the one released for its secret are not due again in this pass;
    # the one released without a note (a receiver skipped for the pass) keeps its place
    again = ledger.claim_deliveries(10, due_before=began)
    assert [r["id"] for r in again] == [rows[2]["id"]]
    retried = ledger.delivery(rows[0]["id"])
    assert retried["next_attempt_at"] >= began and retried["attempts"] == 1
    assert ledger.delivery(rows[1]["id"])["last_error"] == "HOOK_SECRET is not set; not sent"
    # a pass begun later finds them due
    later = {r["id"] for r in ledger.claim_deliveries(10)}
    assert later == {rows[0]["id"], rows[1]["id"]}


def test_a_receiver_given_up_on_is_skipped_by_the_claim(outbox):
    ledger, _ = outbox
    assert ledger.claim_deliveries(10, skip_urls=("http://127.0.0.1:9/h",)) == []
    assert len(ledger.claim_deliveries(10, skip_urls=("http://elsewhere/h",))) == 5


def test_rows_whose_secret_is_unset_are_left_alone_after_the_first(outbox, monkeypatch):
    """A run without a batch's webhook secret (another batch's run) used to claim and
    release every such row on every pass: three commits a row a second (a review)."""
    import asyncio

    from afc_cli import webhooks

    ledger, _ = outbox
    assert ledger.claim_deliveries(10, skip_secrets=(SECRET_ENV,)) == []
    monkeypatch.delenv(SECRET_ENV)
    deliverer = webhooks.Deliverer(ledger)

    async def passes():
        try:
            first = await deliverer.drain()
            marks = [ledger.delivery(r["id"])["next_attempt_at"] for r in ledger.deliveries(False)]
            second = await deliverer.drain()
            after = [ledger.delivery(r["id"])["next_attempt_at"] for r in ledger.deliveries(False)]
            return first, second, marks, after
        finally:
            await deliverer.close()

    first, second, marks, after = asyncio.run(passes())
    assert first.skipped == 5 and second.skipped == 0  # tried once, then not claimed again
    assert marks == after
    assert deliverer.unset_secrets == {SECRET_ENV}


# --- PostgreSQL: row locks skipped, the server's clock ---------------------------------------


def test_postgres_claims_skip_rows_another_claim_holds_without_waiting(afc, pg_url, monkeypatch):
    import psycopg

    monkeypatch.setenv(SECRET_ENV, "whsec_" + "A" * 32)
    path = afc.write_manifest(
        manifest(jobs(4), webhook={"url": "http://127.0.0.1:9/h", "secret_env": SECRET_ENV})
    )
    ledger = Ledger(pg_url)
    try:
        m = load_manifest(path)
        ledger.admit(m, "file:///tmp/x", RateCards())
        for spec in m.jobs:
            ledger.finish(ledger.claim(spec.job_id, 60), "succeeded", step="finish")
        ids = sorted(r["id"] for r in ledger.deliveries())
        # another worker is in the middle of its claim: it has locked the two oldest rows
        with psycopg.connect(pg_url) as locker:
            locker.execute("SET lock_timeout = '5s'")
            locked = [
                row[0]
                for row in locker.execute(
                    "SELECT id FROM deliveries ORDER BY next_attempt_at, id LIMIT 2 FOR UPDATE"
                )
            ]
            # a claim that waited on those rows would block here until the lock timeout
            ledger.db.execute("SET lock_timeout = '1s'")
            taken = [r["id"] for r in ledger.claim_deliveries(10)]
            assert sorted(taken) == sorted(set(ids) - set(locked))
            locker.rollback()
        assert sorted(r["id"] for r in _claim_as(pg_url, "host-c:1:1")) == sorted(locked)
    finally:
        ledger.close()


def _claim_as(url: str, owner: str) -> list[dict]:
    other = _other(url, owner)
    try:
        return other.claim_deliveries(10)
    finally:
        other.close()


def test_postgres_delivery_leases_use_the_servers_clock_not_the_hosts(afc, pg_url, monkeypatch):
    url = pg_url
    _ended(afc, url, monkeypatch).close()
    # this host's clock is an hour fast: its leases and retries are still server time
    real = core._now
    monkeypatch.setattr(core, "_now", lambda: real() + 3600)
    skewed = _other(url, "host-fast:1:1")
    try:
        rows = skewed.claim_deliveries(10, 10.0)
        server_now = skewed.lease_clock()
        assert len(rows) == 5
        assert all(server_now + 2 <= r["lease_expires"] <= server_now + 12 + 1 for r in rows)
        # and a retry it schedules is due by the server's clock, not an hour late
        assert skewed.delivery_retry(rows[0]["id"], 503, "HTTP 503", 1.0)
        due = skewed.delivery(rows[0]["id"])["next_attempt_at"]
        assert server_now < due < server_now + 5
    finally:
        skewed.close()
