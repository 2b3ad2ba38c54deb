"""Outside audit 47e: a review decision given another job's sha256 (README: 'A script that
decides on what it was shown names that output')."""

from __future__ import annotations

from conftest import manifest


def test_another_jobs_sha256_is_named_as_such_not_as_a_render_since(afc, ledger_url):
    """The README's script picks a job's sha256 from 'afc review list --json' and approves
    with it; a script that paired one key's sha256 with another key was refused (rightly:
    exit 2, nothing decided) with 'it now has SHA-256 ... (rendered again since)', though
    neither job was rendered again: its person went looking for a render that never happened.
    The refusal now names the job whose output that SHA-256 is, on either ledger."""
    afc.env["AFC_LEDGER"] = ledger_url
    afc.write_manifest(
        manifest(
            [
                {"key": "frame-a", "prompt": "a", "review": True},
                {"key": "frame-b", "prompt": "b", "review": True},
            ]
        )
    )
    assert afc("submit", "manifest.yaml").returncode == 0
    listed = afc.json("review", "list")["awaiting_review"]
    sha = {job["key"]: job["sha256"] for job in listed}
    refused = afc("review", "approve", "frame-a", "--sha256", sha["frame-b"])
    assert refused.returncode == 2, refused.stderr
    assert "nothing was decided" in refused.stderr, refused.stderr
    assert "rendered again since" not in refused.stderr, refused.stderr
    assert f"{sha['frame-b']} is the output of another job, b1/frame-b" in refused.stderr
    assert {job["key"] for job in afc.json("review", "list")["awaiting_review"]} == {
        "frame-a",
        "frame-b",
    }
    # a SHA-256 that is no job's output, for a job rendered once: mistyped
    # (tests/test_review_sha_typo.py)
    other = afc("review", "approve", "frame-a", "--sha256", "0" * 64)
    assert other.returncode == 2 and "mistyped" in other.stderr, other.stderr
    assert afc("review", "approve", "frame-a", "--sha256", sha["frame-a"]).returncode == 0
