"""Two decisions at once on two gates that share the jobs behind them (PostgreSQL): neither
fails with a deadlock. A walk over a gate's dependents locks them a level at a time
(``Ledger._fail_dependents``); a job one gate reaches at its first level and the other at
its second was locked by the two in opposite orders."""

from __future__ import annotations

import threading

from conftest import manifest, race_on_a_lock, resubmitting

from afc_cli.manifest import job_id_for

# 'edit' needs the character frame and the title card; the title card needs both frames.
# The character frame's walk meets 'edit' and 'title' at its first level, locked by id
# ('edit' first); the style frame's meets 'title' first, then 'edit' at its second level.
JOBS = [
    {"key": "style", "prompt": "style frame"},
    {"key": "character", "prompt": "character frame"},
    {"key": "title", "prompt": "title card", "needs": ["style", "character"]},
    {"key": "edit", "prompt": "the edit", "needs": ["character", "title"]},
]


def test_two_cancels_of_gates_sharing_their_dependents_do_not_deadlock(afc, pg_url, monkeypatch):
    from afc_cli import ops
    from afc_cli.ledger.core import Ledger

    assert job_id_for("b1", "edit") < job_id_for("b1", "title")  # the orders that met
    afc.write_manifest(manifest(JOBS))
    assert (
        afc("submit", "manifest.yaml", "--no-run", "-q", env={"AFC_LEDGER": pg_url}).returncode == 0
    )

    style_walk = threading.current_thread()  # the style frame's cancel, started below
    held, proceed = threading.Event(), threading.Event()
    needing = Ledger._needing

    def paused_after_first_level(self, need_ids, where, *, lock=False):
        rows = needing(self, need_ids, where, lock=lock)
        if threading.current_thread() is style_walk and lock and not held.is_set():
            held.set()  # 'title' locked; 'edit' next
            proceed.wait(30)
        return rows

    monkeypatch.setattr(Ledger, "_needing", paused_after_first_level)
    outcome: dict[str, str] = {}

    def cancel(key: str) -> None:
        try:
            out = ops.cancel(pg_url, [key], None)
            outcome[key] = f"cancelled, {out['cancelled'][0].get('dependents_failed', 0)} failed"
        except Exception as exc:  # what the person would see instead
            outcome[key] = f"error: {exc}"

    style_walk = threading.Thread(target=cancel, args=("style",))
    character_walk = threading.Thread(target=cancel, args=("character",))
    race_on_a_lock(pg_url, style_walk, character_walk, held, proceed)
    assert not any(text.startswith("error") for text in outcome.values()), outcome
    # 'title' and 'edit' failed once each, counted by whichever walk reached them
    assert sum(int(text.split(", ")[1].split()[0]) for text in outcome.values()) == 2, outcome
    for key in ("title", "edit"):
        shown = afc.json("show", key, env={"AFC_LEDGER": pg_url})["job"]
        assert (shown["status"], shown["error"]["code"]) == ("failed", "DEPENDENCY_FAILED"), shown


def test_a_re_submit_changing_needs_beside_a_cancel_of_their_gate_does_not_deadlock(
    afc, pg_url, monkeypatch
):
    """A re-submit that gives two blocked shots a new need locks them in its manifest's
    order ('x', then 'y'); the cancel of their frame, at the same moment, walked them in id
    order ('y' first)."""
    from afc_cli import ops
    from afc_cli.ledger.core import Ledger

    assert job_id_for("b1", "y") < job_id_for("b1", "x")
    frame = {"key": "frame", "prompt": "style frame"}
    shots = [{"key": key, "prompt": key, "needs": ["frame"]} for key in ("x", "y")]
    afc.write_manifest(manifest([frame, *shots]))
    env = {"AFC_LEDGER": pg_url}
    assert afc("submit", "manifest.yaml", "--no-run", "-q", env=env).returncode == 0
    character = {"key": "character", "prompt": "character frame"}
    for shot in shots:
        shot["needs"] = ["frame", "character"]
    path = afc.write_manifest(manifest([frame, character, *shots]), "again.yaml")

    submitting = threading.current_thread()  # the re-submit, started below
    held, proceed = threading.Event(), threading.Event()
    regate = Ledger._regate

    def paused_after_the_first(self, *args, **kwargs):
        regate(self, *args, **kwargs)
        if threading.current_thread() is submitting and not held.is_set():
            held.set()  # 'x' written, 'y' next
            proceed.wait(30)

    monkeypatch.setattr(Ledger, "_regate", paused_after_the_first)
    outcome: dict[str, str] = {}

    resubmit = resubmitting(path, pg_url, outcome)

    def cancel() -> None:
        try:
            ops.cancel(pg_url, ["frame"], None)
            outcome["cancel"] = "cancelled"
        except Exception as exc:
            outcome["cancel"] = f"error: {exc}"

    submitting = threading.Thread(target=resubmit)
    cancelling = threading.Thread(target=cancel)
    race_on_a_lock(pg_url, submitting, cancelling, held, proceed)
    assert outcome == {"submit": "admitted", "cancel": "cancelled"}, outcome
