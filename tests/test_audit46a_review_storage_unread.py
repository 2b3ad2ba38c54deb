"""Outside audit 46a: an approval whose storage cannot be read says nothing was decided.

An approval looks for each output in its storage first, and a storage it cannot read stops it
(README). A reviewer's shell without the AWS credentials the render hosts have was told only
"afc: cannot read s3://.../frame.png: no AWS credentials found; set AWS_ACCESS_KEY_ID ...",
exit 1, where a ledger that cannot take a decision says that nothing was decided and to run
the command again: whether the frame was approved was left to guess. It is said as a decision
not made now, with the command to run again; exit 1 as before."""

from __future__ import annotations

from conftest import manifest


def test_an_approval_that_cannot_read_its_storage_says_nothing_was_decided(afc, s3, tmp_path):
    afc.write_manifest(manifest([{"key": "frame", "prompt": "the style frame", "review": True}]))
    assert afc("submit", "manifest.yaml", "--storage", s3.url).returncode == 0

    no_keys = {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "HOME": str(tmp_path)}
    refused = afc("review", "approve", "frame", env=no_keys)
    assert refused.returncode == 1, refused.stderr
    said = " ".join(refused.stderr.split())
    assert "no AWS credentials found" in said, said
    assert "nothing was decided" in said, said
    assert "then run this again: afc review approve frame" in said, said
    assert "Traceback" not in refused.stderr
    assert afc.rows("SELECT status FROM jobs") == [("awaiting_review",)]

    approved = afc("review", "approve", "frame")
    assert approved.returncode == 0, approved.stderr
