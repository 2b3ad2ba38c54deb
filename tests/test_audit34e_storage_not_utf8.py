"""Outside audit 34e: a storage folder whose name is not UTF-8 (a folder named in another
encoding: Latin-1 from an old share, a zip's cp437 names), met as the working folder of a
manifest with a relative storage (or no storage: ./afc-outputs), or named by AFC_STORAGE,
stopped the submit with 'unexpected error: UnicodeEncodeError ... (a bug in afc)', exit 1,
after the ledger file and the storage folder were made. The batch's storage is recorded in
the ledger as UTF-8 text: such a folder is now refused before anything is written, exit 2,
naming the folder with the byte that is not UTF-8."""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from conftest import Afc

MANIFEST = {
    "version": 1,
    "batch": "b1",
    "storage": "file://./renders",
    "defaults": {"chain": [{"provider": "local", "model": "m1"}]},
    "jobs": [{"key": "a", "prompt": "a lighthouse"}],
}


def _folder(tmp_path: Path, name: bytes) -> Path:
    path = os.fsencode(tmp_path) + b"/" + name
    os.mkdir(path)
    return Path(os.fsdecode(path))


def _refused(afc: Afc, result, storage: Path) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "unexpected error" not in result.stderr
    assert "is not UTF-8 text" in result.stderr, result.stderr
    assert "\\xe9" in result.stderr, result.stderr  # the byte, shown
    assert not (afc.cwd / "afc.db").exists()
    assert not storage.exists()


def test_a_relative_storage_in_a_folder_named_in_latin1_is_refused(tmp_path):
    afc = Afc(_folder(tmp_path, b"s\xe9quence"))
    (afc.cwd / "shots.yaml").write_text(yaml.safe_dump(MANIFEST))
    calls = tmp_path / "calls.log"
    for command in ("submit", "plan"):
        result = afc(command, "shots.yaml", env={"AFC_LOCAL_CALL_LOG": str(calls)})
        _refused(afc, result, afc.cwd / "renders")
    assert not calls.exists()


def test_an_afc_storage_folder_named_in_latin1_is_refused(afc, tmp_path):
    (afc.cwd / "shots.yaml").write_text(yaml.safe_dump(MANIFEST))
    storage = os.fsencode(tmp_path) + b"/r\xe9sultats"
    env = dict(afc.env, AFC_STORAGE="file://" + os.fsdecode(storage))
    afc.env = env
    result = afc("submit", "shots.yaml")
    _refused(afc, result, Path(os.fsdecode(storage)))
