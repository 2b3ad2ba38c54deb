"""Outside audit 23h: the ledger as a file over time (a copy of a damaged ledger, ...), through
the real ``afc`` command."""

from __future__ import annotations

import hashlib
import random

from conftest import jobs, manifest


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _damage(path) -> None:
    data = bytearray(path.read_bytes())
    assert len(data) > 64 * 1024
    rng = random.Random(12)
    for i in range(len(data) // 2, len(data) // 2 + 16 * 1024):
        data[i] = rng.randrange(256)
    path.write_bytes(bytes(data))


def test_a_copy_of_a_damaged_ledger_is_refused_before_the_destination_is_made(afc):
    """``afc ledger copy`` of a ledger with damaged pages read part of it, then stopped with exit
    1, 'cannot write to the ledger ... run afc resume' (a run's words: the copy wrote nothing
    wrong, it could not read), and left a new empty ledger at the destination, which a later
    copy of the restored source then had to be pointed elsewhere from. Its pages are checked
    first, as a run's are: exit 2, 'damaged', nothing created."""
    afc.write_manifest(manifest(jobs(300)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    path = afc.cwd / "afc.db"
    _damage(path)
    before = _digest(path)
    result = afc("ledger", "copy", "afc.db", "copy.db")
    assert "Traceback" not in result.stderr
    assert result.returncode == 2, result.stderr
    assert "is damaged" in result.stderr
    assert "afc resume" not in result.stderr
    assert not (afc.cwd / "copy.db").exists()
    assert _digest(path) == before
