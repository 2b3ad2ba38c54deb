"""Durability of the folders a file:// store and the spool make, found by outside audit 56b.

A power cut cannot be pulled in a test: the order is shown by recording, in this test process
only, which folders are fsynced (``os.fsync`` wrapped to note each descriptor's path). A new
folder's name lives in the folder above it, so it is on disk only once that folder is fsynced;
the object's own folder fsync does not write it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture
def synced(monkeypatch):
    """The folders fsynced from now on, in order (files fsynced are left out)."""
    seen: list[Path] = []
    real = os.fsync

    def fsync(fd):
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if path.is_dir():
            seen.append(path)
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


def test_a_store_makes_its_new_folders_durable_up_to_the_root(tmp_path, synced, monkeypatch):
    """Key ``a/b/c/x.png`` in an empty storage folder: ``a``, ``b`` and ``c`` are made, and
    before the store returns (so before the ledger may record the job stored) the root, ``a``
    and ``b`` are fsynced, each holding a new folder's name. Only ``c`` was fsynced: a power cut
    could leave the ledger saying stored while ``a/`` was gone from the root."""
    from afc_cli.spool import Spool
    from afc_cli.storage import file as file_mod

    monkeypatch.setattr(file_mod, "_MADE", set())
    root = tmp_path / "out"
    storage = file_mod.FileStorage(root)
    storage.check()
    spooled = Spool(tmp_path / "spool").write("job", b"png bytes")
    synced.clear()
    meta = {"job_id": "job", "request_hash": "h", "sha256": spooled.sha256, "size": 9}
    storage.put_if_absent("a/b/c/x.png", spooled.path, meta, sync=False)
    assert (root / "a/b/c/x.png").read_bytes() == b"png bytes"
    assert set(synced) == {root, root / "a", root / "a/b"}
    # the object's own folder is the caller's to fsync (coalesced: ``unsynced_dirs``)
    assert storage.unsynced_dirs("a/b/c/x.png") == (root / "a/b/c",)
    # a second key in a folder that exists makes nothing and fsyncs nothing more
    synced.clear()
    storage.put_if_absent("a/b/c/y.png", spooled.path, {**meta, "job_id": "other"}, sync=False)
    monkeypatch.setattr(file_mod, "_MADE", set())  # a new process: it finds the folder
    storage.put_if_absent("a/b/c/z.png", spooled.path, {**meta, "job_id": "third"}, sync=False)
    assert synced == []


def test_a_new_storage_root_and_spool_folder_are_made_durable(tmp_path, synced):
    """``afc submit`` makes the storage folder (``FileStorage.check``) and the spool folder
    (``Spool.check``) when missing; their names, in the folders above, were never fsynced,
    though every output and paid render afterwards lives in them."""
    from afc_cli.spool import Spool
    from afc_cli.storage.file import FileStorage

    FileStorage(tmp_path / "renders/2026-12-06").check()
    assert set(synced) >= {tmp_path, tmp_path / "renders"}
    synced.clear()
    Spool(tmp_path / "ledgers/afc.db-spool").check()
    assert set(synced) == {tmp_path, tmp_path / "ledgers"}


def test_a_file_in_the_way_is_still_refused(tmp_path):
    """``make_dirs`` fails as ``mkdir -p`` did where a file takes a folder's name."""
    from afc_cli.spool import make_dirs

    (tmp_path / "a").write_text("not a folder")
    with pytest.raises(NotADirectoryError):  # as Path.mkdir(parents=True) says it
        make_dirs(tmp_path / "a/b")
    with pytest.raises(FileExistsError):
        make_dirs(tmp_path / "a")
    (tmp_path / "gone").symlink_to(tmp_path / "unmounted")
    with pytest.raises(FileExistsError):
        make_dirs(tmp_path / "gone")


# Notes, in ``$AFC_TEST_SYNCED``, every folder under ``$AFC_TEST_UNDER`` that the afc child (or
# its file helper) fsyncs: the order of a power cut's loss cannot be seen otherwise.
NOTE_SYNCS = """
import os
import stat

_fsync, _under, _log = os.fsync, os.environ["AFC_TEST_UNDER"], os.environ["AFC_TEST_SYNCED"]


def _noting(fd):
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path.startswith(_under):
            with open(_log, "a") as log:
                log.write(path + "\\n")
    return _fsync(fd)


os.fsync = _noting
"""


def _noting(afc) -> tuple[dict[str, str], Path]:
    site = afc.cwd / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(NOTE_SYNCS)
    log = afc.cwd / "synced.log"
    return {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
        "AFC_TEST_UNDER": str(afc.outputs()),
        "AFC_TEST_SYNCED": str(log),
    }, log


def test_an_own_object_found_is_made_durable_before_it_is_recorded(afc):
    """A run killed after linking a job's object into its folder, before its fsync of that
    folder (the object's entry in memory only), leaves the object for the next run, which
    records the job succeeded from it: at its store step (the store finds its own object) or
    at its probe (a ledger made anew over the folder). Neither fsynced the folder, so a power
    cut after could leave the job succeeded with no file. Each now fsyncs it first."""
    import shutil

    from conftest import manifest

    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    calls = afc.cwd / "calls.log"
    killed = afc(
        "submit",
        "manifest.yaml",
        env={"AFC_CRASH_POINT": "after_store", "AFC_LOCAL_CALL_LOG": str(calls)},
    )
    assert killed.returncode < 0 or killed.returncode == 137, killed.stderr
    env, log = _noting(afc)
    result = afc("resume", env={**env, "AFC_LOCAL_CALL_LOG": str(calls)})
    assert result.returncode == 0, result.stderr
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert str(afc.outputs() / "b1") in log.read_text().splitlines()  # the store step
    # the ledger made anew over the same folder: the probe finds the job's own object
    (afc.cwd / "afc.db").unlink()
    shutil.rmtree(afc.cwd / "afc.db-spool", ignore_errors=True)
    log.unlink()
    result = afc("submit", "manifest.yaml", env={**env, "AFC_LOCAL_CALL_LOG": str(calls)})
    assert result.returncode == 0, result.stderr
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert str(afc.outputs() / "b1") in log.read_text().splitlines()  # the probe
    assert len(calls.read_text().splitlines()) == 1  # one render, never again


def test_an_own_object_found_with_no_spool_file_is_made_durable_first(afc):
    """As above, the killed run's spool file gone too (a spool on a disk since replaced, or
    removed by hand): the resume's store step finds no render to store, looks at the key and
    finds the job's own object, and records the job succeeded from it. That path fsynced no
    folder either (a mutant skipping its ``_sync_dirs`` passed every test)."""
    import shutil
    import sqlite3

    from conftest import manifest

    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    calls = afc.cwd / "calls.log"
    killed = afc(
        "submit",
        "manifest.yaml",
        env={"AFC_CRASH_POINT": "after_store", "AFC_LOCAL_CALL_LOG": str(calls)},
    )
    assert killed.returncode < 0 or killed.returncode == 137, killed.stderr
    shutil.rmtree(afc.cwd / "afc.db-spool")
    # the store step's path, whether or not the killed run's render checkpoint was written
    # (not written, the resume took the render step's look instead, ``_found_stored``, the
    # next test's: in about half the runs of a fresh clone, so a mutant of this path
    # passed them)
    db = sqlite3.connect(afc.cwd / "afc.db")
    with db:
        db.execute("UPDATE jobs SET step = 'store'")
    db.close()
    env, log = _noting(afc)
    result = afc("resume", env={**env, "AFC_LOCAL_CALL_LOG": str(calls)})
    assert result.returncode == 0, result.stderr
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]
    found = afc.rows("SELECT detail_json FROM steps WHERE step = 'store'")
    assert found == [('{"found":"own output"}',)], found  # the store step's look
    synced = log.read_text().splitlines() if log.exists() else []  # (none: no file)
    assert str(afc.outputs() / "b1") in synced
    assert len(calls.read_text().splitlines()) == 1  # one render, never again


def test_an_own_object_found_at_the_render_step_is_made_durable_first(afc):
    """As above, the killed run's render checkpoint lost with it too (its ledger at the
    render step, as when the commit that moved it on had not been written): the resume's
    render step looks at the key before paying again, finds the job's own object and
    records the job stored from it (``_found_stored``). That look fsynced no folder until
    f84763c, and the test before this one reaches it only when the killed run's checkpoint
    happened not to be written: pinned here, the step put back by hand."""
    import shutil
    import sqlite3

    from conftest import manifest

    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    calls = afc.cwd / "calls.log"
    killed = afc(
        "submit",
        "manifest.yaml",
        env={"AFC_CRASH_POINT": "after_store", "AFC_LOCAL_CALL_LOG": str(calls)},
    )
    assert killed.returncode < 0 or killed.returncode == 137, killed.stderr
    shutil.rmtree(afc.cwd / "afc.db-spool")
    db = sqlite3.connect(afc.cwd / "afc.db")
    with db:
        db.execute("UPDATE jobs SET step = 'render'")
        db.execute("DELETE FROM steps WHERE step <> 'probe'")
    db.close()
    env, log = _noting(afc)
    result = afc("resume", env={**env, "AFC_LOCAL_CALL_LOG": str(calls)})
    assert result.returncode == 0, result.stderr
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]
    found = afc.rows("SELECT detail_json FROM steps WHERE step = 'render'")
    assert found == [('{"found":"own output"}',)], found  # that look, not the store step's
    synced = log.read_text().splitlines() if log.exists() else []
    assert str(afc.outputs() / "b1") in synced
    assert len(calls.read_text().splitlines()) == 1  # one render, never again
