"""``afc webhooks replay --dead`` beside a re-submit that changes the batch's webhook, on a
PostgreSQL ledger (outside audit 57e): both write many of the batch's delivery rows in one
transaction, a chunk (``IN_CHUNK``) at a time, in orders of their own."""

from __future__ import annotations

import time

import psycopg
from conftest import frozen_at, manifest
from pg_stalls import SECRET, lock_waits, stop, wake_until_ended

from afc_cli.ledger.core import IN_CHUNK


def test_a_replay_of_dead_events_beside_a_resubmit_moving_the_webhook(afc, pg_url):
    """Two chunks of dead events (the receiver was down; every job cancelled). The replay
    queues the first chunk's again and stalls before the second's; the batch is submitted
    again with another webhook, its jobs listed the other way round: its first chunk of jobs
    took their events' rows (the replay's second chunk) and waited for one of the replay's
    first. Woken, the replay waited for its second chunk: a deadlock, PostgreSQL failing the
    submit (or the replay). Now both take the rows in the order of their ids, the replay all
    of them before its first write: the re-submit waits holding none of them, then moves
    every event not yet delivered to the new webhook."""
    keys = [f"shot-{n:04d}" for n in range(IN_CHUNK * 2)]
    data = manifest([{"key": key, "prompt": f"p {key}"} for key in keys])
    data["webhook"] = {"url": "http://127.0.0.1:9/hooks", "secret_env": "AFC_HOOK_SECRET"}
    afc.write_manifest(data)
    env = {"AFC_LEDGER": pg_url, "AFC_HOOK_SECRET": SECRET}
    first = afc("submit", "manifest.yaml", "--no-run", env=env)
    assert first.returncode == 0, first.stderr
    cancel = afc("cancel", "--batch", "b1", "--yes", env=env)
    assert cancel.returncode == 0, cancel.stderr
    with psycopg.connect(pg_url) as conn:  # the receiver was down: every event dead
        conn.execute("UPDATE deliveries SET status = 'dead'")
    data["jobs"] = [{"key": key, "prompt": f"p {key}"} for key in reversed(keys)]
    data["webhook"] = {"url": "http://127.0.0.1:9/moved", "secret_env": "AFC_HOOK_SECRET"}
    afc.write_manifest(data, "again.yaml")
    replay = afc.popen(
        "webhooks",
        "replay",
        "--dead",
        "--batch",
        "b1",
        env={**env, "AFC_STALL_POINT": "requeued_chunk"},
    )
    again = None
    try:
        frozen_at(replay, timeout=60)  # its first chunk's rows written
        again = afc.popen("submit", "again.yaml", "--no-run", env=env)
        deadline = time.monotonic() + 60
        while again.poll() is None and not lock_waits(pg_url):
            assert time.monotonic() < deadline, "the re-submit neither waited nor ended"
            time.sleep(0.05)
        wake_until_ended(replay, "replay")
        again.wait(timeout=120)
    finally:
        stop(replay, again)
    said = replay.stderr.read() + again.stderr.read()
    assert "deadlock" not in said, said
    assert again.returncode == 0, said
    assert replay.returncode in (0, 1), said  # (1: its posts to the receiver, down, failed)
    with psycopg.connect(pg_url) as conn:
        urls = conn.execute("SELECT DISTINCT url FROM deliveries").fetchall()
    assert urls == [("http://127.0.0.1:9/moved",)]
