"""A copy into a ``file://`` storage that a killed run left half written (its temporary file,
one name per object: ``FileStorage._create``, ``_copy_name``). Every object's metadata is
written by such a copy, and so is the object where the spool is on another file system than
the storage. The path that meets one was never executed by a test (outside audit 52a measured
the storage tests' coverage)."""

from __future__ import annotations

import hashlib
import json

from conftest import jobs, manifest


def test_a_metadata_copy_a_killed_run_left_neither_blocks_the_store_nor_stays(afc):
    """The next store of that key writes a temporary file of its own, links it into place and
    removes the one left: the job succeeds and its metadata is whole. Would catch the leftover
    taken for the metadata itself (the key read as held by nobody's job: the paid render
    refused OUTPUT_KEY_CONFLICT), or left in the storage folder for good."""
    folder = afc.outputs() / "b1"
    folder.mkdir(parents=True)
    name = "shot-001.png.afc.json"
    left = folder / f".afc-{hashlib.sha256(name.encode()).hexdigest()[:32]}.tmp"
    left.write_bytes(b'{"job_id": "half wri')  # a run killed mid-copy
    afc.write_manifest(manifest(jobs(1)))
    out = afc.json("submit", "manifest.yaml")
    assert out["counts"] == {"succeeded": 1}, out
    meta = json.loads((folder / name).read_text())
    job_id = afc.rows("SELECT id FROM jobs")[0][0]
    assert meta["job_id"] == job_id
    assert (folder / "shot-001.png").read_bytes().startswith(b"\x89PNG")
    assert not left.exists(), "the half-written copy was left in the storage folder"
    assert sorted(p.name for p in folder.iterdir()) == ["shot-001.png", name]
