"""A replayed delivery is due on the clock its claims compare with (``Ledger.lease_clock``),
as an event written or retried is. ``afc webhooks replay`` (one, or ``--dead``) set the row's
``next_attempt_at`` from ``Ledger.clock``, this host's clock corrected by its last estimate of
the database's (PostgreSQL): ahead of the database's clock by that estimate's error, the row was
not due for the replay's own pass, which posted nothing (noticed by outside audit 60c)."""

from __future__ import annotations

from conftest import jobs, manifest
from receiver import Receiver
from test_webhooks import SECRET

from afc_cli.ledger import Ledger


def test_a_replayed_delivery_is_due_at_once_whatever_this_hosts_clock_says(afc, ledger_url):
    receiver = Receiver(default=(301, 0.0, {"Location": "https://moved.example/"})).start()
    try:
        data = manifest(jobs(2))
        afc.env["AFC_WEBHOOK_SECRET"] = SECRET
        data["webhook"] = {"url": receiver.url, "secret_env": "AFC_WEBHOOK_SECRET", "timeout_s": 2}
        afc.write_manifest(data)
        assert afc("submit", "manifest.yaml", "--ledger", ledger_url).returncode == 0
        # the run posted each event once: a 301 is not followed, the delivery dead
        ledger = Ledger(ledger_url)
        try:
            dead = [
                row[0]
                for row in ledger.db.execute(
                    "SELECT id FROM deliveries WHERE status = 'dead' ORDER BY id"
                ).fetchall()
            ]
            assert len(dead) == 2
            # this host's estimate of the database's clock a minute ahead of it
            ledger.clock = lambda: ledger.lease_clock() + 60
            assert ledger.requeue_delivery(dead[0])
            assert ledger.requeue_dead_deliveries() == 1
            due = ledger.db.execute(
                "SELECT COUNT(*) FROM deliveries WHERE status = 'pending' AND next_attempt_at <= ?",
                (ledger.lease_clock(),),
            ).fetchone()[0]
            assert due == 2
        finally:
            ledger.close()
    finally:
        receiver.stop()
