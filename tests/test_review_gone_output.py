"""An approval looks for the output it makes ``succeeded``: a job awaiting review whose output
was deleted from storage (or cut short) after it was verified was approved all the same, a
``succeeded`` job ("stored and verified") with nothing stored under its key, which afc never
renders again: ``afc outputs`` listed a missing file and the jobs needing it failed
INPUT_UNAVAILABLE for good. It is refused now (exit 2, nothing decided), saying how to render
it again, and that way works."""

from __future__ import annotations

from conftest import manifest


def awaiting(afc) -> str:
    afc.write_manifest(
        manifest(
            [
                {"key": "frame", "prompt": "the style frame", "review": True},
                {"key": "shot", "prompt": "the shot", "needs": ["frame"]},
            ]
        )
    )
    done = afc("submit", "manifest.yaml")
    assert done.returncode == 0, done.stderr
    [(key,)] = afc.rows("SELECT output_key FROM jobs WHERE key = 'frame'")
    return key


def decided(afc) -> int:
    return afc.rows("SELECT COUNT(*) FROM reviews")[0][0]


def status(afc, key: str) -> str:
    return afc.rows("SELECT status FROM jobs WHERE key = ?", (key,))[0][0]


def test_an_output_gone_from_storage_is_not_approved(afc):
    output = afc.outputs() / awaiting(afc)
    output.unlink()
    refused = afc("review", "approve", "frame")
    assert refused.returncode == 2, refused.stderr
    assert "is gone from storage" in refused.stderr, refused.stderr
    assert "'afc cancel frame' then 'afc retry frame'" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    assert decided(afc) == 0 and status(afc, "frame") == "awaiting_review"
    assert status(afc, "shot") == "blocked"
    # the way the message gives renders it again, and the approval then goes through
    for args in (("cancel", "frame", "--yes"), ("retry", "frame"), ("resume",)):
        done = afc(*args)
        assert done.returncode == 0, (args, done.stderr)
    assert output.exists() and status(afc, "frame") == "awaiting_review"
    approved = afc("review", "approve", "frame")
    assert approved.returncode == 0, approved.stderr
    assert status(afc, "frame") == "succeeded"


def test_an_output_cut_short_is_not_approved_and_a_rejection_needs_no_look(afc):
    output = afc.outputs() / awaiting(afc)
    output.write_bytes(output.read_bytes()[:100])
    refused = afc("review", "approve", "frame", "--json")
    assert refused.returncode == 2, refused.stderr
    assert "is 100 bytes, not the" in refused.stdout + refused.stderr
    assert decided(afc) == 0 and status(afc, "frame") == "awaiting_review"
    # a rejection makes nothing succeeded: it is taken whatever storage holds
    rejected = afc("review", "reject", "frame", "--reason", "the file was cut short")
    assert rejected.returncode == 0, rejected.stderr
    assert status(afc, "frame") == "rejected" and decided(afc) == 1


def test_an_output_in_place_is_approved(afc):
    awaiting(afc)
    approved = afc("review", "approve", "frame")
    assert approved.returncode == 0, approved.stderr
    assert status(afc, "frame") == "succeeded" and decided(afc) == 1
