"""examples/workers/afc-worker.service as systemd reads its exit codes (outside audit 27c)."""

from __future__ import annotations

from pathlib import Path

from conftest import jobs, manifest

UNIT = Path(__file__).resolve().parent.parent / "examples" / "workers" / "afc-worker.service"


def _restarted(code: int) -> bool:
    """Whether systemd starts the unit's worker again after it exits ``code``
    (tests/test_audit28b_worker_unit.py reads the unit's rules)."""
    from test_audit28b_worker_unit import restarted

    return restarted(code)


def test_a_worker_whose_budget_is_spent_is_not_restarted_for_ever(afc):
    """A worker given --max-spend exits 4 once the budget is spent; the unit restarted it
    every 5 s, for ever: each start claimed the jobs, found the budget spent, said so in
    three lines and exited 4 again, and the unit never showed as failed."""
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    spent = afc("worker", "--max-spend", "0.05", "--poll", "0.1")
    assert spent.returncode == 4, spent.stderr
    again = afc("worker", "--max-spend", "0.05", "--poll", "0.1")
    assert again.returncode == 4, again.stderr  # what each restart would do
    assert not _restarted(4)
    # the ones that should come back still do: a lost ledger connection (1), a ledger an
    # upgrade holds back (2), and (Restart=always, tests/test_audit28b_worker_unit.py) a
    # worker a hang-up drained (0, or 130 if it abandoned calls)
    assert _restarted(1) and _restarted(2) and _restarted(130) and _restarted(0)
