"""Outside audit 34d: a SQLite ledger whose write lock another process holds past the busy
timeout while paid calls are in flight (a sqlite3 shell, a backup script, a cron'd report
left in a transaction)."""

from __future__ import annotations

import sqlite3
import time
from collections import Counter

from conftest import jobs, manifest


def _calls(afc) -> Counter:
    path = afc.cwd / "calls.log"
    lines = path.read_text().split() if path.exists() else []
    return Counter(lines[0::2])  # "<job id> <attempt>" per call


def test_paid_renders_that_return_into_a_locked_ledger_are_kept_and_not_paid_again(afc):
    """The four calls in flight returned, paid, while another process held the ledger's
    write lock: the first job's write of its known cost waited out the busy timeout and
    failed with SQLite's own error, which the run took for a bug in afc: it cancelled the
    other jobs and never wrote the renders in memory to the spool. 'afc resume' then paid
    for all four again. Met so, the lock is the ledger write error it is everywhere else:
    the run stops, its renders go to the spool, and the next run stores them from there."""
    afc.env["AFC_LOCAL_CALL_LOG"] = str(afc.cwd / "calls.log")
    afc.write_manifest(manifest(jobs(4)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    release = afc.cwd / "release"
    run = afc.popen("resume", "--concurrency", "4", env={"AFC_LOCAL_RELEASE": str(release)})
    deadline = time.monotonic() + 60
    while sum(_calls(afc).values()) < 4:  # every call sent, its attempt row committed
        assert run.poll() is None, run.stderr.read()
        assert time.monotonic() < deadline, "the calls were not all sent"
        time.sleep(0.05)
    holder = sqlite3.connect(afc.cwd / "afc.db", isolation_level=None, timeout=30)
    try:
        holder.execute("BEGIN IMMEDIATE")  # once the run's group commit let go of it
        release.touch()  # the four renders return, paid, into a ledger locked past its wait
        _, err = run.communicate(timeout=150)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert run.returncode == 1, err
    assert "another process held the ledger's write lock too long" in err
    assert "Traceback" not in err
    assert "kept" in err, err  # said where the paid renders wait

    again = afc("resume")
    assert again.returncode == 0, again.stderr
    assert afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("succeeded", 4)]
    assert sorted(_calls(afc).values()) == [1, 1, 1, 1], "a paid render was paid for again"
