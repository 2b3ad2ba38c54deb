"""Webhook delivery across interruptions and copies, found by outside audit 18: what a stopped
run still posts, what it leaves leased, and what a ledger copy says of the events in flight."""

from __future__ import annotations

import base64
import signal
import sqlite3
import threading
import time

from conftest import jobs, manifest
from receiver import Receiver

SECRET = "whsec_" + base64.b64encode(b"afc test secret, 32 bytes long!!").decode()


def test_a_worker_stopped_before_its_loop_began_posts_no_event(afc, s3):  # noqa: F811
    """A worker sent SIGTERM while its round opened the storages (the bucket's HEAD: seconds
    on a slow link) started its run loop already draining, as README says: no job ran. But
    the loop's webhook drain, started after the stop was acted on, was never told of it: it
    went on posting every due event of the ledger, and once more after the jobs (up to 15 s,
    each POST up to its timeout_s, 120 s at most), so a worker told to stop went on talking
    to receivers for minutes (a container's grace period then kills it mid-POST). A stopped
    run posts nothing more: its events wait for the next run or 'afc webhooks deliver'."""
    receiver = Receiver().start()
    try:
        afc.env["AFC_HOOK_SECRET"] = SECRET
        hook = {"url": "http://127.0.0.1:9/down", "secret_env": "AFC_HOOK_SECRET"}
        afc.write_manifest(manifest(jobs(1), batch="b0", webhook=hook), "m0.yaml")
        assert afc("submit", "m0.yaml", "--storage", s3.url).returncode == 0
        # b0's event is pending (its receiver was down), due now at a receiver that answers
        with sqlite3.connect(afc.cwd / "afc.db") as conn:
            conn.execute("UPDATE deliveries SET url = ?, next_attempt_at = 0", (receiver.url,))
        afc.write_manifest(manifest(jobs(1), webhook={**hook, "url": receiver.url}))
        assert afc("submit", "manifest.yaml", "--no-run", "--storage", s3.url).returncode == 0

        stalled, release = threading.Event(), threading.Event()
        take = s3.plan.take

        def stall(method, path):  # the round's check of the bucket, before its loop
            if method == "HEAD" and path.rstrip("/").endswith(s3.bucket):
                stalled.set()
                release.wait(30)
            return take(method, path)

        s3.plan.take = stall
        worker = afc.popen("worker", "--poll", "0.2")
        try:
            assert stalled.wait(30), "the worker did not check the bucket"
            worker.send_signal(signal.SIGTERM)
            time.sleep(0.2)  # the worker's handler has set its stop
            release.set()
            code = worker.wait(timeout=60)
        finally:
            release.set()
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        err = worker.stderr.read()
        assert code == 0, err
        assert receiver.received == [], "a stopped worker posted events"
        assert afc.rows("SELECT status FROM jobs WHERE batch = 'b1'") == [("queued",)]
        assert afc.rows("SELECT status, lease_owner FROM deliveries") == [("pending", None)]
    finally:
        receiver.stop()


def test_a_drain_stopped_as_its_claim_returned_leaves_no_row_leased(afc, monkeypatch):
    """A stop acted on in the loop's turn right after a drain's claim (on PostgreSQL a signal
    during the claim's round trip: the run acts on it at once, no commit sync to wait for)
    cancelled the drain before any receiver's turn had begun: those turns never ran, so their
    'release what was not posted' never did, and every row of the claim (up to 64) stayed
    leased to the stopped process for its timeout plus 120 s, skipped by 'afc webhooks
    deliver' meanwhile though nothing was posting them. Rows claimed and not posted are
    released whatever stopped the drain."""
    import asyncio

    import pytest

    from afc_cli.ledger import Ledger
    from afc_cli.webhooks import Deliverer

    hook = {"url": "http://127.0.0.1:9/down", "secret_env": "AFC_HOOK_SECRET"}
    afc.env["AFC_HOOK_SECRET"] = SECRET
    afc.write_manifest(manifest(jobs(3), webhook=hook))
    assert afc("submit", "manifest.yaml").returncode == 0
    with sqlite3.connect(afc.cwd / "afc.db") as conn:  # all three due now
        conn.execute("UPDATE deliveries SET next_attempt_at = 0")
    monkeypatch.setenv("AFC_HOOK_SECRET", SECRET)
    ledger = Ledger(str(afc.cwd / "afc.db"), create=False)
    try:
        real = ledger.claim_deliveries
        claimed: list[dict] = []

        def claim(*args, **kwargs):
            rows = real(*args, **kwargs)
            claimed.extend(rows)
            asyncio.current_task().cancel()  # the stop, acted on before the next turn
            return rows

        ledger.claim_deliveries = claim

        async def main() -> None:
            deliverer = Deliverer(ledger)
            try:
                await deliverer.drain()
            finally:
                await deliverer.close()

        with pytest.raises(asyncio.CancelledError):
            asyncio.run(main())
    finally:
        ledger.close()
    assert len(claimed) == 3
    assert afc.rows("SELECT status, lease_owner FROM deliveries") == [("pending", None)] * 3


def test_a_delivery_under_way_on_a_copied_ledger_posts_nothing_more_from_it(afc, tmp_path):
    """'afc webhooks deliver' (cron) was posting the source's events to a slow receiver when
    'afc ledger copy' moved the ledger (a deliver holds no job's lease, so nothing refused
    the copy). The deliver went on with its pass on the moved source, posting every event it
    had claimed or claimed next, while the new ledger, which holds them all pending, posts
    them too: each one twice, two processes at once, the source's outcomes (a 410 that
    disables an endpoint, a dead row) recorded where no run reads them. A moved ledger's
    deliveries are neither claimed nor held for a POST: only the POST in flight at the copy
    goes out from the source (the copy holds it leased to that process, and posts it again,
    same webhook-id, once the lease runs out)."""
    receiver = Receiver().start()
    receiver.gate = threading.Event()
    try:
        afc.env["AFC_HOOK_SECRET"] = SECRET
        hook = {"url": "http://127.0.0.1:9/down", "secret_env": "AFC_HOOK_SECRET"}
        afc.write_manifest(manifest(jobs(3), webhook={**hook, "timeout_s": 60}))
        assert afc("submit", "manifest.yaml").returncode == 0
        with sqlite3.connect(afc.cwd / "afc.db") as conn:  # all three due at the receiver
            conn.execute("UPDATE deliveries SET url = ?, next_attempt_at = 0", (receiver.url,))
        deliver = afc.popen("webhooks", "deliver")
        try:
            deadline = time.time() + 30
            while not receiver.received:  # its first POST is under way, held
                assert deliver.poll() is None and time.time() < deadline, deliver.stderr.read()
                time.sleep(0.02)
            moved = afc("ledger", "copy", "afc.db", str(tmp_path / "new.db"))
            assert moved.returncode == 0, moved.stderr
            receiver.gate.set()
            assert deliver.wait(timeout=60) == 0, deliver.stderr.read()
        finally:
            receiver.gate.set()
            if deliver.poll() is None:
                deliver.kill()
                deliver.wait()
        first = receiver.received[0].headers["webhook-id"]
        assert [r.headers["webhook-id"] for r in receiver.received] == [first], (
            "the moved source went on posting"
        )
        # the new ledger holds them as the copy found them, leased to the deliver that had
        # claimed them: it sends all three once those leases have run out (here: made to),
        # the one that was in flight again with the same webhook-id
        with sqlite3.connect(tmp_path / "new.db") as conn:
            assert conn.execute("SELECT COUNT(*) FROM deliveries WHERE lease_owner IS NOT NULL")
            conn.execute("UPDATE deliveries SET lease_expires = 0")
        sent = afc("webhooks", "deliver", "--ledger", str(tmp_path / "new.db"))
        assert sent.returncode == 0, sent.stderr
        ids = [r.headers["webhook-id"] for r in receiver.received]
        assert len(ids) == 4 and len(set(ids)) == 3 and ids.count(first) == 2, ids
    finally:
        receiver.stop()


def test_a_moved_ledgers_deliveries_are_neither_claimed_nor_held(afc, ledger_url):
    """The rule above on both engines: once 'afc ledger copy' moved a ledger, no claim takes
    its due deliveries and no pass that claimed them before holds one for its POST."""
    from afc_cli.ledger import Ledger

    afc.env["AFC_HOOK_SECRET"] = SECRET
    hook = {"url": "http://127.0.0.1:9/down", "secret_env": "AFC_HOOK_SECRET"}
    afc.write_manifest(manifest(jobs(2), webhook=hook))
    assert afc("submit", "manifest.yaml", env={"AFC_LEDGER": ledger_url}).returncode == 0
    source = Ledger(ledger_url, create=False)
    try:
        with source.tx():
            source.db.execute("UPDATE deliveries SET next_attempt_at = 0")
        [claimed] = source.claim_deliveries(1)  # a pass under way on the source
        assert source.deliveries_due()
        moved = afc("ledger", "copy", ledger_url, str(afc.cwd / "new.db"))
        assert moved.returncode == 0, moved.stderr
        assert not source.deliveries_due()
        assert source.claim_deliveries(10) == []
        assert source.hold_delivery(claimed["id"]) is None
        assert [row["status"] for row in source.deliveries()] == ["pending"] * 2
    finally:
        source.close()


def test_a_worker_stopped_as_it_found_events_due_posts_none(afc, monkeypatch):
    """A worker with no job to claim looks whether any event is due, then drains. A SIGTERM
    that came during that look (or the claim before it: round trips, a busy ledger's wait)
    set the worker's stop, and the drain began all the same: in its first turn it claimed
    the due rows and opened a POST before it saw the stop, and the POST it then abandoned
    kept its row leased to the stopped worker for its timeout plus 120 s. A worker that is
    stopping starts no drain."""
    import os

    from afc_cli.ledger import Ledger
    from afc_cli.worker import work

    receiver = Receiver().start()
    try:
        afc.env["AFC_HOOK_SECRET"] = SECRET
        monkeypatch.setenv("AFC_HOOK_SECRET", SECRET)
        hook = {"url": "http://127.0.0.1:9/down", "secret_env": "AFC_HOOK_SECRET"}
        afc.write_manifest(manifest(jobs(1), webhook=hook))
        assert afc("submit", "manifest.yaml").returncode == 0
        with sqlite3.connect(afc.cwd / "afc.db") as conn:  # due now, at a receiver that answers
            conn.execute("UPDATE deliveries SET url = ?, next_attempt_at = 0", (receiver.url,))
        real = Ledger.deliveries_due

        def signalled_meanwhile(self):
            os.kill(os.getpid(), signal.SIGTERM)  # the worker's own handler: its stop
            return real(self)

        monkeypatch.setattr(Ledger, "deliveries_due", signalled_meanwhile)
        monkeypatch.chdir(afc.cwd)
        result = work(ledger_path=str(afc.cwd / "afc.db"), concurrency=1, grace_s=0, poll_s=0.2)
        assert result.exit_code == 0 and result.stopped_by_signal
        assert receiver.received == [], "a stopping worker posted an event"
        assert afc.rows("SELECT status, lease_owner FROM deliveries") == [("pending", None)]
    finally:
        receiver.stop()
