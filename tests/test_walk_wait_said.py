"""A command that must wait for another afc's walk of the same batch (PostgreSQL's advisory
walk lock, ``PostgresLedger._hold_walk``) says so at once. A re-submit giving 10,000 shots a
new need holds it about 9 s, and 'afc retry', 'afc cancel' or a review decision in that batch
waited as long without a word; past the lock timeout (30 s) it failed naming only a psql
session or a ledger copy."""

from __future__ import annotations

import threading

from conftest import manifest, race_on_a_lock

from afc_cli import streams
from afc_cli.errors import ledger_write_error


def test_a_retry_waiting_for_a_cancels_walk_of_its_batch_says_so(afc, pg_url, monkeypatch):
    from afc_cli import ops
    from afc_cli.ledger.core import Ledger

    env = {"AFC_LEDGER": pg_url}
    listed = [
        {"key": "frame", "prompt": "style frame"},
        {"key": "shot", "prompt": "shot", "needs": ["frame"]},
        {"key": "other", "prompt": "other"},
    ]
    afc.write_manifest(manifest(listed, batch="a"))
    assert afc("submit", "manifest.yaml", "--no-run", "-q", env=env).returncode == 0
    assert afc("cancel", "other", "--batch", "a", env=env).returncode == 0

    walking = threading.current_thread()  # the frame's cancel, started below
    held, proceed = threading.Event(), threading.Event()
    needing = Ledger._needing

    def paused_in_the_walk(self, need_ids, where, *, lock=False):
        rows = needing(self, need_ids, where, lock=lock)
        if threading.current_thread() is walking and not held.is_set():
            held.set()  # the batch's walk lock held
            proceed.wait(30)
        return rows

    said: list[str] = []
    monkeypatch.setattr(Ledger, "_needing", paused_in_the_walk)
    monkeypatch.setattr(streams, "say_to", said.append)
    outcome: dict[str, str] = {}

    def cancel() -> None:
        out = ops.cancel(pg_url, ["frame"], "a")
        outcome["cancel"] = f"{out['cancelled'][0].get('dependents_failed', 0)} failed"

    def retry() -> None:
        out = ops.retry(pg_url, ["other"], "a", [], by="tester")
        outcome["retry"] = out["retried"][0]["status"]

    walking = threading.Thread(target=cancel)
    race_on_a_lock(pg_url, walking, threading.Thread(target=retry), held, proceed)
    assert outcome == {"cancel": "1 failed", "retry": "queued"}, outcome
    assert len(said) == 1, said
    assert said[0].startswith("waiting for another afc changing the jobs of batch 'a'"), said


def test_no_wait_says_nothing(afc, pg_url, monkeypatch):
    from afc_cli import ops

    env = {"AFC_LEDGER": pg_url}
    afc.write_manifest(manifest([{"key": "other", "prompt": "other"}], batch="a"))
    assert afc("submit", "manifest.yaml", "--no-run", "-q", env=env).returncode == 0
    said: list[str] = []
    monkeypatch.setattr(streams, "say_to", said.append)
    ops.cancel(pg_url, ["other"], "a")
    ops.retry(pg_url, ["other"], "a", [], by="tester")
    assert said == []


def test_the_lock_timeout_names_a_large_re_submit(pg_url):
    import psycopg

    exc = psycopg.errors.LockNotAvailable("canceling statement due to lock timeout")
    assert "a re-submit changing the needs" in str(ledger_write_error(pg_url, exc))
