"""Outside audit 46a: ``afc cancel --batch B`` names the jobs awaiting review it leaves.

A batch cancel leaves a job awaiting review to its review, by design (README, Cancel), but
said nothing of it: the style frame of a batch whose shots were cancelled was still listed by
'afc review list', counted by 'afc queue stats' (a cron alerting on
oldest_review_age_seconds fires days later), and approvable, while a second cancel of the
batch said "no unfinished job to cancel in batch b1". The cancel now names them, with what
ends them, and --json lists them (``left_to_review``)."""

from __future__ import annotations

from conftest import manifest


def test_a_batch_cancel_names_the_jobs_it_leaves_to_their_review(afc):
    afc.write_manifest(
        manifest(
            [
                {"key": "frame", "prompt": "the style frame", "review": True},
                {"key": "shot", "prompt": "the shot", "needs": ["frame"]},
            ]
        )
    )
    assert afc("submit", "manifest.yaml").returncode == 0

    first = afc("cancel", "--batch", "b1", "--yes")
    assert first.returncode == 0, first.stderr
    assert "b1/shot: cancelled" in first.stderr
    assert "1 job awaiting review left to its review: frame" in first.stderr, first.stderr
    assert "'afc review reject KEY --reason TEXT' ends one" in first.stderr

    again = afc("cancel", "--batch", "b1", "--yes")
    assert again.returncode == 0, again.stderr
    assert "no unfinished job to cancel" not in again.stderr, again.stderr
    assert "no other unfinished job to cancel in batch b1" in again.stderr
    assert "left to its review: frame" in again.stderr

    shown = afc.json("cancel", "--batch", "b1", "--yes")
    assert shown["left_to_review"] == [{"key": "frame", "batch": "b1"}]
    assert afc.rows("SELECT status FROM jobs WHERE key = 'frame'") == [("awaiting_review",)]

    # named by its key, the cancel ends it as the line says; a batch cancel then has none left
    assert afc("cancel", "frame").returncode == 0
    assert afc.json("cancel", "--batch", "b1", "--yes")["left_to_review"] == []
