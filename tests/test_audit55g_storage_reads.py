"""Outside audit 55g: a storage read that fails is a storage error, retried, never a
foreign object at the key."""

from __future__ import annotations

import os
import resource

import pytest

from afc_cli.errors import StorageError


def test_metadata_that_cannot_be_opened_now_is_a_storage_error_not_a_foreign_object(tmp_path):
    """With every file descriptor of the process in use (EMFILE: a run of thousands of jobs
    against a low 'ulimit -n'), the look at an output's metadata failed to open it, and
    file storage read the key as holding metadata it could not read: a foreign object, the
    job failed OUTPUT_KEY_CONFLICT for a person to decide. It is a retryable storage error."""
    from afc_cli.storage.file import FileStorage

    source = tmp_path / "spooled"
    source.write_bytes(b"\x89PNG\r\n\x1a\n")
    store = FileStorage(tmp_path / "out")
    meta = {"job_id": "j", "request_hash": "h", "sha256": "s", "size": 8}
    store.put_if_absent("b1/shot.png", source, meta)
    StorageError("an error's message is scrubbed: its module imported before the limit")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    free = os.dup(0)  # the lowest free descriptor: a limit there leaves none to open
    os.close(free)
    resource.setrlimit(resource.RLIMIT_NOFILE, (free, hard))
    try:
        with pytest.raises(StorageError) as raised:
            store.head("b1/shot.png")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert raised.value.retryable
    assert "Too many open files" in str(raised.value)
    assert store.head("b1/shot.png").meta["job_id"] == "j"  # read again, afc's own
