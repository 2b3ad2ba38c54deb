"""Outside audit 46a: a decision on a job cancelled awaiting review says how it comes back.

A style frame awaiting review, cancelled by its key (by mistake, or to stop the shots behind
it for a while), could not be decided: 'afc review approve frame' said "it is cancelled, not
awaiting review", exit 2, and nothing more. Its output is verified and stored: 'afc retry
frame', then a run, puts it back to review without paying for it again (the run's probe takes
its own stored output). The refusal now says so, and the way works."""

from __future__ import annotations

from conftest import manifest


def test_approving_a_job_cancelled_awaiting_review_names_the_way_back(afc):
    afc.write_manifest(
        manifest(
            [
                {"key": "frame", "prompt": "the style frame", "review": True},
                {"key": "shot", "prompt": "the shot", "needs": ["frame"]},
            ]
        )
    )
    assert afc("submit", "manifest.yaml").returncode == 0
    assert afc("cancel", "frame").returncode == 0

    refused = afc("review", "approve", "frame")
    assert refused.returncode == 2, refused.stderr
    said = " ".join(refused.stderr.split())
    assert "it is cancelled, not awaiting review" in said, said
    assert "'afc retry frame', then a run, puts it back to review" in said, said
    assert "nothing paid again" in said

    # the way it names: back to review with the one render it had, then approved
    assert afc("retry", "frame").returncode == 0
    assert afc("resume").returncode == 0
    assert afc.rows("SELECT status FROM jobs WHERE key = 'frame'") == [("awaiting_review",)]
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(1,)]
    assert afc("review", "approve", "frame").returncode == 0

    # a job not awaiting review for another reason (blocked behind it now): nothing more said
    refused = afc("review", "approve", "shot")
    assert refused.returncode == 2 and "puts it back to review" not in refused.stderr
