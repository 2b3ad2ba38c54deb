"""'afc cancel --batch' beside a re-submit changing the gates of the batch's jobs, on a
PostgreSQL ledger (outside audit 57e): the cancel holds the batch's free jobs a chunk
(``IN_CHUNK``) at a time in one transaction; the re-submit wrote each job's new gates as its
rounds met them, in the manifest's order."""

from __future__ import annotations

import time

import psycopg
from conftest import frozen_at, manifest
from pg_stalls import lock_waits, stop, wake_until_ended

from afc_cli.ledger.core import IN_CHUNK


def test_a_cancel_of_the_batch_beside_a_resubmit_changing_its_gates(afc, pg_url):
    """Two chunks of queued jobs. 'afc cancel --batch' holds the first chunk's and stalls
    before the second's; the batch is submitted again asking a review of every job, listed
    the other way round: it wrote the second chunk's gates, then waited for a job of the
    first. Woken, the cancel waited for the second chunk: a deadlock, PostgreSQL failing the
    submit (or the cancel). Now the re-submit writes the gates after its rounds, the rows
    taken all at once, holding none while the cancel holds one: the cancel ends, and the
    re-submit finds the jobs it cancelled ended (their gates kept, said)."""
    keys = [f"shot-{n:04d}" for n in range(IN_CHUNK * 2)]
    data = manifest([{"key": key, "prompt": f"p {key}"} for key in keys])
    afc.write_manifest(data)
    env = {"AFC_LEDGER": pg_url}
    first = afc("submit", "manifest.yaml", "--no-run", env=env)
    assert first.returncode == 0, first.stderr
    data["jobs"] = [{"key": key, "prompt": f"p {key}", "review": True} for key in reversed(keys)]
    afc.write_manifest(data, "again.yaml")
    cancel = afc.popen(
        "cancel", "--batch", "b1", "--yes", env={**env, "AFC_STALL_POINT": "held_chunk"}
    )
    again = None
    try:
        frozen_at(cancel, timeout=60)  # its first chunk of jobs held
        again = afc.popen("submit", "again.yaml", "--no-run", env=env)
        deadline = time.monotonic() + 60
        while again.poll() is None and not lock_waits(pg_url, trying=True):
            assert time.monotonic() < deadline, "the re-submit neither waited nor ended"
            time.sleep(0.05)
        wake_until_ended(cancel, "cancel")
        again.wait(timeout=120)
    finally:
        stop(cancel, again)
    said = cancel.stderr.read() + again.stderr.read()
    assert "deadlock" not in said, said
    assert again.returncode == 0, said
    assert cancel.returncode == 0, said
    with psycopg.connect(pg_url) as conn:
        assert conn.execute(
            "SELECT status, review, COUNT(*) FROM jobs GROUP BY status, review"
        ).fetchall() == [("cancelled", 0, len(keys))]
