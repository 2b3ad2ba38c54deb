"""A gated submit renders its style frame in the same run: every shot that needs it waits for
the frame's task (``pipeline.wait_for_needs``). As the frame ended awaiting review, each shot
woke to a ``Ledger.settle_blocked`` transaction that only found it still blocked: 20,000 shots
sent 40,000 statements more (6.7 s -> 5.9 s on SQLite). A shot whose needs here all ended
awaiting review stays blocked without that look; the run's end looks again
(``run._settle_left``), so a decision made meanwhile still runs it in this run."""

from __future__ import annotations

from conftest import manifest

from afc_cli import run as run_mod
from afc_cli.ledger import Ledger

SHOTS = 40


def _statuses(ledger_url: str) -> dict[str, int]:
    ledger = Ledger(ledger_url)
    try:
        rows = ledger.db.execute("SELECT status, COUNT(*) FROM jobs GROUP BY status").fetchall()
        return {status: count for status, count in rows}
    finally:
        ledger.close()


def test_a_gated_submit_s_shots_wake_to_no_transaction_when_their_frame_awaits_review(
    afc, ledger_url, monkeypatch, tmp_path
):
    frame = {"key": "frame", "prompt": "the style frame", "review": True}
    shots = [{"key": f"shot-{i}", "prompt": f"s{i}", "needs": ["frame"]} for i in range(SHOTS)]
    # needs a shot that fails in this run: woken by it, it is looked at and fails with it
    broken = {"key": "broken", "prompt": "x", "params": {"fail": ["invalid"]}}
    mixed = {"key": "mixed", "prompt": "both", "needs": ["frame", "broken"]}
    afc.write_manifest(manifest([frame, *shots, broken, mixed]))
    settled: list[str] = []
    real = Ledger.settle_blocked

    def counted(self, job_id):
        settled.append(job_id)
        return real(self, job_id)

    monkeypatch.setattr(Ledger, "settle_blocked", counted)
    monkeypatch.chdir(afc.cwd)
    monkeypatch.setenv("AFC_SPOOL_DIR", str(tmp_path / "spool"))
    result = run_mod.submit(
        str(afc.cwd / "manifest.yaml"), ledger_path=ledger_url, storage=None, concurrency=4
    )
    assert result.exit_code == 1  # 'broken' failed, and 'mixed' with it
    # a look each as they began; 'mixed' once more, woken by 'broken' (was one more a shot)
    assert len(settled) == SHOTS + 1 + 1, len(settled)
    assert _statuses(ledger_url) == {"awaiting_review": 1, "blocked": SHOTS, "failed": 2}
