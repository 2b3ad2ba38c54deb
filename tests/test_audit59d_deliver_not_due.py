"""Outside audit 59d, the command line: ``afc webhooks deliver`` posts the events that are due
and says what it did. An event waiting out a retry's backoff (up to 10 minutes) is not due, and
the command said only '0 delivered, 0 retrying, 0 dead, 0 skipped', exit 0, as it does when
the outbox is empty: a person who had just mended the receiver, or a cron line flushing the
outbox, read that nothing was waiting while it was. It now says how many wait and when the
first is due (``not_due`` and ``next_due_at`` in ``--json``), as it says the due events
another process's claim holds (tests/test_audit58a_held_not_counted.py). Through the real afc
command; the backoff is set in the ledger, not waited for."""

from __future__ import annotations

import sqlite3
import time

from test_audit59d_webhooks_list_reason import submitted_to_a_refusing_receiver


def test_deliver_says_the_events_not_due_yet(afc):
    submitted_to_a_refusing_receiver(afc, "k1", "k2")
    due = time.time() + 400  # both wait out a backoff of about 6 to 7 minutes
    with sqlite3.connect(afc.cwd / "afc.db") as conn:
        conn.execute("UPDATE deliveries SET next_attempt_at = ?", (due,))
    conn.close()

    result = afc("webhooks", "deliver")
    assert result.returncode == 0, result.stderr
    assert "0 delivered, 0 retrying, 0 dead, 0 skipped" in result.stderr
    assert "2 pending webhook events are not due yet" in result.stderr, result.stderr
    stamp = time.strftime("%Y-%m-%dT%H:%M", time.gmtime(due))
    assert stamp in result.stderr, result.stderr
    assert "afc webhooks replay ID" in result.stderr

    report = afc.json("webhooks", "deliver")
    assert report["not_due"] == 2 and report["next_due_at"].startswith(stamp), report
    assert report["delivered"] == report["retrying"] == report["dead"] == 0

    assert afc("webhooks", "deliver", "-q").stderr == ""  # -q: nothing said
    # nothing was posted or changed by those runs
    statuses = {d["status"] for d in afc.json("webhooks", "list")["deliveries"]}
    assert statuses == {"pending"}

    # once none waits, nothing more is said
    with sqlite3.connect(afc.cwd / "afc.db") as conn:
        conn.execute("UPDATE deliveries SET status = 'dead'")
    conn.close()
    quiet = afc("webhooks", "deliver")
    assert "not due" not in quiet.stderr and quiet.returncode == 0, quiet.stderr
    assert afc.json("webhooks", "deliver")["not_due"] == 0
