"""A re-submit whose tries to take its rows all at once (``_lock_together``) ran out, on a
PostgreSQL ledger (outside audit 57e): past ``LOCK_WAIT_S`` of tries it wrote the rows one by
one, waiting for each, the very order that deadlocks with a run's lease renewal (every job it
holds, one statement, in the order of its index, not the manifest's or the ids')."""

from __future__ import annotations

import subprocess
import sys
import time

import psycopg
from conftest import manifest
from pg_stalls import SECRET

# 'afc submit' with afc's tries shortened to half a second (the rows' one-by-one waits keep
# the session's lock_timeout, PGOPTIONS: long enough for the deadlock to be detected first)
SUBMIT_WITH_SHORT_TRIES = (
    "import sys; import afc_cli.ledger.postgres as pg; pg.LOCK_WAIT_S = 0.5; "
    "sys.argv = ['afc', 'submit', *sys.argv[1:]]; "
    "from afc_cli.cli import main; main()"
)


def test_a_resubmit_whose_tries_ran_out_waits_for_no_row_holding_another(afc, pg_url):
    """Another transaction (a run's group, its renewal: here a session standing for it)
    holds the first job's row past the re-submit's tries, then wants the second's. The
    re-submit, its tries over, wrote the second job's webhook (the manifest lists it first)
    and waited for the first's: a deadlock, PostgreSQL failing one of the two (a run: it
    stops, exit 1). Now the re-submit, its tries over, takes the rows without waiting or
    not at all: refused as a lock held too long (exit 1, nothing written, said), it held
    nothing the other wanted; run again once the rows are free, it writes them."""
    jobs = [{"key": key, "prompt": f"p {key}"} for key in ("shot-b", "shot-a")]
    data = manifest(jobs)
    data["webhook"] = {"url": "http://127.0.0.1:9/hooks", "secret_env": "AFC_HOOK_SECRET"}
    afc.write_manifest(data)
    env = {"AFC_LEDGER": pg_url, "AFC_HOOK_SECRET": SECRET}
    first = afc("submit", "manifest.yaml", "--no-run", env=env)
    assert first.returncode == 0, first.stderr
    data["webhook"] = {"url": "http://127.0.0.1:9/moved", "secret_env": "AFC_HOOK_SECRET"}
    afc.write_manifest(data, "again.yaml")
    again, failed = None, None
    with psycopg.connect(pg_url) as writer:  # another writer of the batch's rows
        writer.execute("SET lock_timeout = '20s'")
        writer.execute("UPDATE jobs SET updated_at = updated_at WHERE key = 'shot-a'")
        try:
            again = subprocess.Popen(
                [sys.executable, "-c", SUBMIT_WITH_SHORT_TRIES, "again.yaml", "--no-run"],
                cwd=afc.cwd,
                env={**afc.env, **env, "PGOPTIONS": "-c lock_timeout=20000"},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            # the re-submit, its tries over, waits for the first job's row (before), or has
            # ended, refused (now)
            deadline = time.monotonic() + 60
            with psycopg.connect(pg_url, autocommit=True) as look:
                while (
                    again.poll() is None
                    and not look.execute(
                        "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                        " AND pid <> pg_backend_pid()"
                    ).fetchone()[0]
                ):
                    assert time.monotonic() < deadline, "the re-submit neither waited nor ended"
                    time.sleep(0.05)
            try:
                writer.execute("UPDATE jobs SET updated_at = updated_at WHERE key = 'shot-b'")
                writer.commit()
            except psycopg.Error as exc:
                failed = str(exc)
                writer.rollback()
            again.wait(timeout=60)
        finally:
            if again is not None and again.poll() is None:
                again.kill()
                again.wait()
    said = again.stderr.read()
    assert failed is None, failed  # the other writer was not failed
    assert "deadlock" not in said, said
    assert again.returncode == 1, said
    assert "held a lock on the ledger's jobs too long" in said, said
    with psycopg.connect(pg_url) as conn:
        hooks = [row[0] for row in conn.execute("SELECT webhook_json FROM jobs").fetchall()]
    assert all("/hooks" in hook for hook in hooks), hooks  # nothing written
    done = afc("submit", "again.yaml", "--no-run", env=env)
    assert done.returncode == 0, done.stderr
    with psycopg.connect(pg_url) as conn:
        hooks = [row[0] for row in conn.execute("SELECT webhook_json FROM jobs").fetchall()]
    assert len(hooks) == 2 and all("/moved" in hook for hook in hooks), hooks
