"""A worker says and counts the blocked jobs *its* look failed with DEPENDENCY_FAILED
(``worker.Settle``, ``Ledger.settle_ready_blocked``'s ``failed``), not those another process
failed between the look's read of the blocked jobs and its settling of each (one transaction
each: a thousand of them take seconds). Another worker settling the same jobs at the same
moment, a rejection failing them (``_fail_dependents``), an 'afc resume': each job was said
"ended failed" by both, counted in both workers' summaries, and a worker that failed none
exited 1 under --until-idle."""

from __future__ import annotations

from conftest import manifest

from afc_cli.ledger import Ledger


def test_a_dependent_another_process_failed_meanwhile_is_not_this_looks(afc):
    afc.write_manifest(
        manifest(
            [
                {"key": "style", "prompt": "a style frame", "review": True},
                {"key": "shot", "prompt": "a shot", "needs": ["style"]},
            ]
        )
    )
    assert afc("submit", "manifest.yaml").returncode == 0
    assert afc("review", "reject", "style", "--reason", "too dark").returncode == 0
    assert afc("retry", "shot").returncode == 0  # blocked again, its need still rejected

    this, other = Ledger(afc.cwd / "afc.db"), Ledger(afc.cwd / "afc.db")
    try:
        ((shot_id,),) = afc.rows("SELECT id FROM jobs WHERE key = 'shot'")
        shot = this.job(shot_id)
        assert shot["status"] == "blocked"
        tx = this.tx
        raced = []

        def another_process_first(*args, **kwargs):
            # the look has read its blocked jobs; another worker settles this one first
            if not raced:
                raced.append(other.settle_blocked(shot["id"])[0])
            return tx(*args, **kwargs)

        this.tx = another_process_first
        failed: list = []
        this.settle_ready_blocked(None, 1000, failed)
    finally:
        this.close()
        other.close()
    assert raced == ["failed"]  # the other process failed it
    assert failed == []  # not this look: not said or counted by this worker
