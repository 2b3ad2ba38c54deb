"""What afc says after a review decision, of jobs it summarises together and of a gate a
re-submit keeps (outside audit 28b)."""

from __future__ import annotations

from conftest import manifest


def _row(key: str, status: str) -> dict:
    return {"batch": "b", "key": key, "status": status, "step": "probe", "error": None,
            "waiting": None}  # fmt: skip


def test_jobs_summarised_together_are_spoken_of_as_several():
    """'3 jobs queued at probe (...): not started; 'afc resume' (or an 'afc worker') runs it'."""
    from afc_cli.cli import _not_ok_lines

    [queued] = _not_ok_lines([_row(f"k{i}", "queued") for i in range(3)])
    assert queued.startswith("3 jobs queued at probe (b/k0, b/k1, b/k2;")
    assert queued.endswith("): not started; 'afc resume' (or an 'afc worker') runs them")
    [blocked] = _not_ok_lines([_row(f"k{i}", "blocked") for i in range(2)])
    assert blocked.endswith("): each waits for the jobs it needs ('afc show KEY' names them)")
    # one job as before
    assert _not_ok_lines([_row("k0", "queued")]) == [
        "b/k0: queued at probe: not started; 'afc resume' (or an 'afc worker') runs it"
    ]


def test_a_kept_change_of_needs_on_a_job_awaiting_review_is_not_for_a_review_to_decide():
    """A review decides the job's output, not its needs: the warning said "'afc review
    approve KEY' (or reject) decides it" of needs a rendered job keeps whatever is decided."""
    from afc_cli.gates import kept_message

    kept = {"key": "frame", "field": "needs", "manifest": ["a"], "admitted": [],
            "status": "awaiting_review", "why": "the job has been rendered (1 attempt(s))"}  # fmt: skip
    said = kept_message(kept)
    assert "review approve" not in said
    assert "a new key renders the request again under the new gates" in said
    review = {**kept, "field": "review", "manifest": False, "admitted": True}
    assert "'afc review approve frame' (or reject) decides it" in kept_message(review)


def test_an_approval_says_what_waits_for_it_only_when_something_does(afc):
    """'afc review approve' said "jobs that needed them run at the next 'afc resume' (or
    cron)" of a job nothing needs."""
    afc.write_manifest(
        manifest(
            [
                {"key": "alone", "prompt": "nothing needs it", "review": True},
                {"key": "frame", "prompt": "a style frame", "review": True},
                {"key": "shot", "prompt": "uses it", "needs": ["frame"]},
            ]
        )
    )
    assert afc("submit", "manifest.yaml").returncode == 0
    alone = afc("review", "approve", "alone")
    assert alone.returncode == 0, alone.stderr
    assert alone.stderr == "afc: alone: approved\n", alone.stderr
    frame = afc("review", "approve", "frame")
    assert frame.returncode == 0, frame.stderr
    assert "1 blocked job needs them: it runs at the next 'afc resume'" in frame.stderr
