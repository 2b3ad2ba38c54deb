"""Outside audit 31c: a file:// storage whose folder is a symbolic link to a drive or share
not mounted, or a file, is refused saying so, not with mkdir's '[Errno 17] File exists'."""

from __future__ import annotations

import os

import pytest
from conftest import manifest


@pytest.mark.parametrize(
    ("storage", "said"),
    [
        (
            "renders",
            "renders is a symbolic link to /mnt/afc-nas-not-mounted/renders, which "
            "does not exist (a drive or share not mounted?)",
        ),
        (
            "renders/trailer",
            "renders is a symbolic link to /mnt/afc-nas-not-mounted/renders, which does not exist",
        ),
        ("loop", "loop is a symbolic link that leads back to itself"),
        ("notes.txt", "notes.txt is a file, not a directory"),
        ("notes.txt/sub", "notes.txt is a file, not a directory"),
    ],
)
def test_a_storage_folder_that_cannot_be_one_is_named_with_why(afc, storage, said):
    """A studio's renders/ linked to a NAS mount point, the NAS not mounted tonight: afc
    said 'cannot use storage file:///.../renders: [Errno 17] File exists: '.../renders'',
    as if the folder were there."""
    os.symlink("/mnt/afc-nas-not-mounted/renders", afc.cwd / "renders")
    os.symlink("loop", afc.cwd / "loop")
    (afc.cwd / "notes.txt").write_text("not a folder")
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    result = afc("submit", "manifest.yaml", "--storage", f"file://./{storage}")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "Errno" not in result.stderr, result.stderr
    assert f"cannot use storage file://{afc.cwd}/{storage}: {afc.cwd}/{said}" in result.stderr, (
        result.stderr
    )
    assert not (afc.cwd / "afc.db").exists()
