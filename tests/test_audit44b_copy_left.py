"""Outside audit 44b, storage: a ``file://`` storage on another file system than the spool (a
NAS share, an external drive, a container's volume) takes each output as a copy, written to a
hidden temporary file beside the object and linked into place. A run killed during that copy
(SIGKILL, an OOM kill, a container stopped past its grace, a power cut) left the temporary
file, up to the output's size (a video's gigabytes), in the storage folder for good: the
next run stored the job from its spool, and nothing ever removed the half copy, as afc's
S3 storage aborts the multipart upload a killed run left of a key once its own completes."""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import time

from afc_cli.storage.file import FileStorage


def _meta(data: bytes) -> dict:
    return {
        "job_id": "j1",
        "key": "shot",
        "request_hash": "h",
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def test_a_copy_a_killed_run_left_in_the_storage_folder_goes_once_the_key_is_stored(
    tmp_path, monkeypatch
):
    data = os.urandom(3 << 20)  # 3 MiB: the copy goes a MiB at a time
    spool = tmp_path / "spool"
    spool.mkdir()
    spooled = spool / "j1.spool"
    spooled.write_bytes(data)
    pipe = spool / "j1.pipe"  # the render's bytes, arriving slowly: the copy waits on them
    os.mkfifo(pipe)
    root = tmp_path / "nas"
    storage = FileStorage(root)
    storage.check()

    # the spool on another file system than the storage: its files are copied, not linked
    real_link = os.link

    def link(src, dst, *args, **kwargs):
        if str(src).startswith(str(spool)):
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real_link(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "link", link)
    child = os.fork()
    if child == 0:  # the run killed during its copy
        try:
            FileStorage(root).put_if_absent("b1/shot.png", pipe, _meta(data))
        finally:
            os._exit(0)
    with open(pipe, "wb") as feed:
        feed.write(data[: 3 << 19])  # half of it arrived
        feed.flush()
        folder = root / "b1"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # the copy under way: a MiB in its temporary file
            left = list(folder.glob(".afc-*.tmp")) if folder.is_dir() else []
            if left and left[0].stat().st_size >= 1 << 20:
                break
            time.sleep(0.005)
        else:
            raise AssertionError("the copy never began")
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
    assert list(folder.glob(".afc-*.tmp")), "the killed run's half copy is in the folder"
    assert not (folder / "shot.png").exists()

    # the next run stores the job from its spool file (its metadata is there already): a
    # copy too, beside the one left
    storage.put_if_absent("b1/shot.png", spooled, _meta(data))
    assert (folder / "shot.png").read_bytes() == data
    assert storage.verify("b1/shot.png", len(data), _meta(data)["sha256"], spooled) is None
    left = sorted(p.name for p in folder.iterdir())
    assert left == ["shot.png", "shot.png.afc.json"], left
