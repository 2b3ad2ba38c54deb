"""Outside audit 46a: an approval whose storage folder is not there says so.

A batch's outputs in a folder on a share (file:///mnt/nas/renders) that is not mounted where
the reviewer runs 'afc review approve' (the mount dropped, another machine's disk) were each
said "gone from storage ... Restore the file, or render it again: 'afc cancel frame' then
'afc retry frame'". Followed, the run made the folder afresh on this machine and paid for the
frame's render again, the first one still on the share. The approval now says the folder is
not there and to approve where it is (or, deleted, how to render it again); with the folder
back, it goes through."""

from __future__ import annotations

from conftest import manifest


def test_an_approval_whose_storage_folder_is_not_there_says_so(afc, tmp_path):
    share = tmp_path / "nas" / "renders"
    afc.write_manifest(manifest([{"key": "frame", "prompt": "the style frame", "review": True}]))
    assert afc("submit", "manifest.yaml", "--storage", f"file://{share}").returncode == 0
    unmounted = tmp_path / "unmounted"
    share.rename(unmounted)  # the share's mount gone: the folder is not there

    refused = afc("review", "approve", "frame")
    assert refused.returncode == 2, refused.stderr
    said = " ".join(refused.stderr.split())
    assert f"its storage folder {share} is not there" in said, said
    assert "approve where that folder is, or once it is mounted here" in said, said
    assert "is gone from storage" not in said, said
    assert afc.rows("SELECT status FROM jobs") == [("awaiting_review",)]

    unmounted.rename(share)
    approved = afc("review", "approve", "frame")
    assert approved.returncode == 0, approved.stderr
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(1,)]
