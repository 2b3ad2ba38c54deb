"""Outside audit 25d: what 'afc status' says of a job against README's table of statuses."""

from __future__ import annotations

from conftest import manifest


def test_a_blocked_job_whose_needs_succeeded_says_what_it_waits_for(afc):
    """README ("Job statuses"): a blocked job waits for the jobs it needs, and 'afc status'
    names them. Once the style frame was approved (with 'afc review approve', or the Approve
    button of 'afc serve', which prints no hint), its shots stay blocked until the next run,
    and 'afc status' listed them blocked with no reason at all: a reviewer took the approved
    shots for stuck. The reason now says their needs have succeeded and what runs them."""
    afc.write_manifest(
        manifest(
            [
                {"key": "frame", "prompt": "style", "review": True},
                {"key": "shot", "prompt": "shot", "needs": ["frame"]},
                {"key": "title", "prompt": "title", "needs": ["shot"]},
            ]
        )
    )
    assert afc("submit", "manifest.yaml").returncode == 0
    assert afc("review", "approve", "frame").returncode == 0
    jobs = {job["key"]: job for job in afc.json("status")["jobs"]}
    assert jobs["shot"]["status"] == "blocked"
    assert jobs["shot"]["waiting"] == (
        "its needs have succeeded: the next 'afc resume' (or an 'afc worker') runs it"
    )
    assert jobs["title"]["waiting"] == "waiting for 1 need: shot"
    rows = afc("status").stdout.splitlines()
    (shot,) = [line.split("\t") for line in rows if line.startswith("shot\t")]
    assert "the next 'afc resume'" in shot[rows[0].split("\t").index("reason")], rows

    assert afc("resume").returncode == 0
    assert afc.rows("SELECT key, status FROM jobs ORDER BY key") == [
        ("frame", "succeeded"),
        ("shot", "succeeded"),
        ("title", "succeeded"),
    ]
