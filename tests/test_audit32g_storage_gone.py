"""A file storage folder that is not there, though outputs were stored in it (outside audit
32g): a NAS share or an external drive not mounted after a reboot (its mount point an empty
folder), a container started without its outputs volume. Every run made the folder anew
(``mkdir -p``) on the machine's own disk and stored the batch's next outputs there: hidden
once the share was mounted again over it (or gone with the container), the jobs succeeded,
their paid renders nowhere to be found. Now a run refuses a storage folder that is gone
while the ledger records outputs of a batch stored in it (exit 2, nothing rendered), and
afc makes that folder only for a batch with none; nor is it made again during a run."""

from __future__ import annotations

import hashlib

import pytest
from conftest import jobs, manifest

from afc_cli.errors import StorageError
from afc_cli.storage.file import FileStorage


def test_a_run_refuses_a_storage_folder_gone_since_outputs_were_stored_there(afc):
    (afc.cwd / "nas").mkdir()
    storage = f"file://{afc.cwd / 'nas' / 'renders'}"
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml", "--storage", storage).returncode == 0
    afc.write_manifest(manifest(jobs(3)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0  # two more admitted
    (afc.cwd / "nas").rename(afc.cwd / "nas-mounted")  # the share unmounted:
    (afc.cwd / "nas").mkdir()  # its mount point an empty folder
    for command in (("submit", "manifest.yaml"), ("resume",)):
        refused = afc(*command)
        assert refused.returncode == 2, refused.stderr
        assert "Traceback" not in refused.stderr
        assert f"{afc.cwd / 'nas' / 'renders'} does not exist" in refused.stderr
        assert "1 output of batch b1 was stored there" in refused.stderr, refused.stderr
        assert not (afc.cwd / "nas" / "renders").exists(), "not made on this disk"
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(1,)], "nothing rendered"
    (afc.cwd / "nas").rmdir()
    (afc.cwd / "nas-mounted").rename(afc.cwd / "nas")  # mounted again
    assert afc("resume").returncode == 0
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(3,)]
    assert len(list((afc.cwd / "nas" / "renders" / "b1").glob("*.png"))) == 3


def test_a_storage_folder_gone_during_a_run_is_not_made_again(tmp_path):
    root = tmp_path / "nas" / "renders"
    storage = FileStorage(root)
    storage.check()  # before the run: made (a batch with nothing stored yet)
    source = tmp_path / "job.spool"
    source.write_bytes(b"paid render")
    meta = {
        "job_id": "j1",
        "request_hash": "h",
        "size": 11,
        "sha256": hashlib.sha256(b"paid render").hexdigest(),
    }
    storage.put_if_absent("b1/one.png", source, meta)
    root.rename(tmp_path / "elsewhere")  # unmounted mid-run
    with pytest.raises(StorageError) as caught:
        storage.put_if_absent("b1/two.png", source, {**meta, "job_id": "j2"})
    assert not caught.value.retryable and "does not exist" in caught.value.message
    with pytest.raises(StorageError):
        storage.check_again()  # the run's check after a failed store
    assert not root.exists()
