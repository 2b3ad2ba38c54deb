"""Outside audit 25c (money figures against the ledger): every figure afc prints of what was
spent agrees with the attempts table, through the real ``afc`` command (the providers' fakes
in tests/fakeproviders.py)."""

from __future__ import annotations

import os
import signal
import sqlite3

from conftest import manifest, wait_for

REPLICATE = "black-forest-labs/flux-schnell"


def test_a_cancelled_jobs_paid_call_left_by_a_killed_run_counts_as_failed_spend(afc, fake):
    """A Replicate render answered (3.2 s, priced 0.023200 and written on its attempt at once,
    README "Budget") while its output could not be downloaded yet; the job was cancelled and
    the run killed before the download: the attempt stays ``started`` with its known cost, of
    a job that has ended, which afc counts as an attempt of unknown outcome
    (``LEFT_STARTED_SQL``). ``afc costs report`` counted it in ``unknown_attempts`` but left
    its cost out of ``failed_spend`` ("known cost of failed and unknown-outcome attempts"),
    where the same attempt marked ``unknown`` is counted: the report said 0.000000 was
    wasted of a 0.023200 call that produced nothing."""
    data = manifest(
        [
            {
                "key": "a",
                "prompt": "cdn-held sunrise",
                "chain": [{"provider": "replicate", "model": REPLICATE, "attempts": 1}],
            }
        ]
    )
    data["rates"] = [{"provider": "replicate", "model": REPLICATE, "per_second": "0.00725"}]
    afc.write_manifest(data)
    run = afc.popen("submit", "manifest.yaml")
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE cost_micros IS NOT NULL", 1)
        os.kill(run.pid, signal.SIGSTOP)  # its output still out of reach: the call not ended
        cancelled = afc("cancel", "a", "--batch", "b1", "--yes")
        assert cancelled.returncode == 0, cancelled.stderr
    finally:
        os.kill(run.pid, signal.SIGKILL)
        run.wait()
    assert afc.rows("SELECT j.status, a.status, a.cost_micros FROM attempts a JOIN jobs j") == [
        ("cancelled", "started", 23200)
    ]
    total = afc.json("costs", "report")["total"]
    assert total["priced"] == "0.023200"
    assert total["unknown_attempts"] == 1
    assert total["failed_spend"] == "0.023200", total
    # as the same attempt once marked unknown is counted
    with sqlite3.connect(afc.cwd / "afc.db") as conn:
        conn.execute("UPDATE attempts SET status = 'unknown'")
    assert afc.json("costs", "report")["total"] == total


def test_the_costs_report_of_a_moved_ledger_says_where_its_spend_went(afc):
    """'afc ledger copy' moves a ledger's work: its jobs run on the destination from then on,
    and the copy holds the history too. 'afc status' and 'afc queue stats' of the old ledger
    say so; 'afc costs report' (a cron's daily spend mail, an alert's figure) printed the old
    figures alone, which stop growing at the move, with no word that the spend goes on
    elsewhere, nor that the new ledger's report counts the same attempts again. It now says
    where the ledger went, on stderr; its figures (stdout, --json) are unchanged."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    assert afc("submit", "manifest.yaml").returncode == 0
    copied = afc("ledger", "copy", "afc.db", "sqlite:///back.db")
    assert copied.returncode == 0, copied.stderr
    old = afc("costs", "report", "--json")
    assert old.returncode == 0, old.stderr
    assert "moved to" in old.stderr and "back.db" in old.stderr, old.stderr
    new = afc("costs", "report", "--json", "--ledger", "back.db")
    assert new.returncode == 0 and "moved" not in new.stderr, new.stderr
    assert old.stdout == new.stdout
    assert '"priced": "0.050000"' in new.stdout
