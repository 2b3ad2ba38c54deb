"""A decision's walk over the jobs behind a job, and a re-submit, hold one batch (PostgreSQL):
a re-submit of one batch leaves a retry, a cancel or a rejection in another batch alone. The
walk's advisory lock (``Ledger._hold_walk``) was one for the whole ledger: a re-submit giving
10,000 shots of batch A a new need held it about 9 s, and 'afc retry' of a job of batch B
waited as long without a word (past lock_timeout, 30 s, it failed blaming 'a psql session
left in a transaction'). A job's needs are jobs of its own batch: walks of two batches never
meet."""

from __future__ import annotations

import threading

from conftest import manifest, resubmitting, waits_on_a_lock


def test_a_re_submit_of_one_batch_holds_no_decision_of_another(afc, pg_url, monkeypatch):
    import psycopg

    from afc_cli import ops
    from afc_cli.ledger.core import Ledger

    env = {"AFC_LEDGER": pg_url}
    frame = {"key": "frame", "prompt": "style frame"}
    shots = [{"key": key, "prompt": key, "needs": ["frame"]} for key in ("x", "y")]
    afc.write_manifest(manifest([frame, *shots], batch="a"))
    assert afc("submit", "manifest.yaml", "--no-run", "-q", env=env).returncode == 0
    # batch b: a cancelled job to retry, a gate with a shot behind it to cancel
    other = [
        {"key": "other", "prompt": "other"},
        {"key": "gate", "prompt": "gate"},
        {"key": "behind", "prompt": "behind", "needs": ["gate"]},
    ]
    afc.write_manifest(manifest(other, batch="b"), "b.yaml")
    assert afc("submit", "b.yaml", "--no-run", "-q", env=env).returncode == 0
    assert afc("cancel", "other", "--batch", "b", env=env).returncode == 0
    character = {"key": "character", "prompt": "character frame"}
    for shot in shots:
        shot["needs"] = ["frame", "character"]
    path = afc.write_manifest(manifest([frame, character, *shots], batch="a"), "again.yaml")

    submitting = threading.current_thread()  # batch a's re-submit, started below
    held, proceed = threading.Event(), threading.Event()
    regate = Ledger._regate

    def paused_after_the_first(self, *args, **kwargs):
        regate(self, *args, **kwargs)
        if threading.current_thread() is submitting and not held.is_set():
            held.set()  # in the re-submit's transaction, its walk lock held
            proceed.wait(30)

    monkeypatch.setattr(Ledger, "_regate", paused_after_the_first)
    outcome: dict[str, str] = {}

    resubmit = resubmitting(path, pg_url, outcome)

    def retry() -> None:
        out = ops.retry(pg_url, ["other"], "b", [], by="tester")
        outcome["retry"] = out["retried"][0]["status"]

    def cancel() -> None:
        out = ops.cancel(pg_url, ["gate"], "b")
        outcome["cancel"] = f"{out['cancelled'][0].get('dependents_failed', 0)} failed"

    submitting = threading.Thread(target=resubmit)
    try:
        submitting.start()
        assert held.wait(30)
        with psycopg.connect(pg_url, autocommit=True) as look:
            for decision in (retry, cancel):
                deciding = threading.Thread(target=decision)
                deciding.start()
                waited = waits_on_a_lock(look, deciding)
                if waited:  # let it end: it waits for the paused re-submit
                    proceed.set()
                deciding.join(60)
                assert not waited, f"{decision.__name__} in batch b waited for a re-submit of a"
        proceed.set()
        submitting.join(60)
    finally:
        proceed.set()
    assert outcome == {"submit": "admitted", "retry": "queued", "cancel": "1 failed"}, outcome
