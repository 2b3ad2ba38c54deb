"""Outside audit 65g: 'afc status --json' on a PostgreSQL ledger, its output not read (a pager,
a script stalled on its pipe), held a transaction open until its last row was written.

``Ledger.read_one_moment`` reads the counts and the streamed jobs of one moment (outside audit
65d), in one REPEATABLE READ transaction; the stream's WITH HOLD cursor kept it open while the
rows went out. Its lock on ``jobs`` stayed: a newer afc's migration (an ALTER TABLE, waiting
at most its lock wait) failed behind it, and every claim queued behind that. Now the moment's
transaction ends once the stream's cursor is declared: the cursor keeps that moment's rows,
and the session waits idle while they are written."""

from __future__ import annotations

import subprocess
import time

from conftest import jobs, manifest


def test_a_status_listing_left_unread_holds_no_transaction(afc, pg_url):
    import psycopg

    afc.write_manifest(manifest(jobs(3000)))
    admitted = afc("submit", "manifest.yaml", "--ledger", pg_url, "--no-run", timeout=300)
    assert admitted.returncode == 0, admitted.stderr
    listing = afc.popen("status", "--all", "--json", "--ledger", pg_url, stdout=subprocess.PIPE)
    try:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            look = (
                "SELECT state, query FROM pg_stat_activity WHERE application_name = 'afc'"
                " AND datname = current_database() AND pid <> pg_backend_pid()"
            )
            deadline = time.monotonic() + 60
            while True:  # its rows fetched, and written into a pipe nobody reads
                sessions = conn.execute(look).fetchall()
                waiting = [s for s, q in sessions if q.startswith("FETCH") and s != "active"]
                if waiting:
                    break
                assert listing.poll() is None, listing.stderr.read()
                assert time.monotonic() < deadline, sessions
                time.sleep(0.05)
            assert waiting == ["idle"], sessions  # was: 'idle in transaction'
            conn.execute("SET lock_timeout = '5s'")
            # a newer afc's migration: was 'canceling statement due to lock timeout'
            conn.execute("ALTER TABLE jobs ADD COLUMN audit65g INTEGER")
            conn.execute("ALTER TABLE jobs DROP COLUMN audit65g")
        out, err = listing.communicate(timeout=120)  # read now: the listing ends whole
    finally:
        if listing.poll() is None:
            listing.kill()
            listing.communicate()
    assert listing.returncode == 0, err
    assert out.rstrip().endswith("}") and out.count('"key"') >= 3000
