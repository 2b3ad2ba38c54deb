"""Outside audit 60d (the spool): a SQLite ledger's spool is the folder beside its file
(``afc.db-spool``). A ledger moved to another folder of the host (``mv afc.db archive/``)
while jobs waited at their store step, their paid renders in the old folder's spool, found no
file beside its new place: every such job was dead-lettered SPOOL_MISSING, its message saying
the file "is gone" while it was where the job's own spool checkpoint recorded it, and the
'afc retry' it asks for, run without copying the file back, paid for each render again. The
store step now looks in the folder the checkpoint names on this host, as it did for a
PostgreSQL ledger only (``pipeline._copy_beside``): a file there whose size and SHA-256 are
the checkpoint's is copied into this spool and stored, nothing paid again."""

from __future__ import annotations

import json

from conftest import manifest

RATES = [{"provider": "local", "model": "m1", "per_image": "0.05"}]


def _left_at_store(afc, ledger: str, log) -> None:
    """Three jobs rendered and spooled, each waiting at its store step: the run ends at an
    error of afc's own as it begins their stores (``fail_point('spooled')``)."""
    data = manifest([{"key": k, "prompt": k} for k in ("a", "b", "c")], rates=RATES)
    afc.write_manifest(data)
    env = {"AFC_LOCAL_CALL_LOG": str(log), "AFC_FAIL_POINT": "spooled"}
    first = afc("submit", "manifest.yaml", "--ledger", ledger, env=env)
    assert first.returncode == 1, first.stderr


def test_a_sqlite_ledger_moved_to_another_folder_stores_the_renders_its_old_spool_holds(afc):
    log = afc.cwd / "calls.log"
    (afc.cwd / "data").mkdir()
    _left_at_store(afc, "data/afc.db", log)
    old_spool = afc.cwd / "data" / "afc.db-spool"
    assert len(list(old_spool.glob("*.spool"))) == 3
    (afc.cwd / "archive").mkdir()
    (afc.cwd / "data" / "afc.db").rename(afc.cwd / "archive" / "afc.db")

    env = {"AFC_LOCAL_CALL_LOG": str(log)}
    resumed = afc("resume", "--ledger", "archive/afc.db", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert "SPOOL_MISSING" not in resumed.stderr
    assert len(log.read_text().splitlines()) == 3, "a render was paid for again"
    status = afc.json("status", "--ledger", "archive/afc.db", "--all")
    assert {job["key"]: job["status"] for job in status["jobs"]} == dict.fromkeys(
        "abc", "succeeded"
    ), status
    stored = sorted(p.name for p in (afc.outputs() / "b1").glob("*.png"))
    assert stored == ["a.png", "b.png", "c.png"]
    copied = afc.json("show", "a", "--ledger", "archive/afc.db")
    assert "spool_copied" in json.dumps(copied)
    # nothing left in either spool: the new folder's copies stored, verified and removed;
    # the old folder, no ledger beside it any more, has no run to sweep its own: removed
    assert list((afc.cwd / "archive" / "afc.db-spool").glob("*.spool")) == []
    assert list(old_spool.iterdir()) == []


def test_a_copy_of_the_ledger_leaves_the_first_ledgers_spool_as_it_was(afc):
    """'cp data/afc.db archive/' (the first ledger still there): the copy stores the renders
    from the first ledger's spool without paying again, and leaves that spool's files to the
    first ledger's runs."""
    import shutil

    log = afc.cwd / "calls.log"
    (afc.cwd / "data").mkdir()
    _left_at_store(afc, "data/afc.db", log)
    old_spool = afc.cwd / "data" / "afc.db-spool"
    (afc.cwd / "archive").mkdir()
    shutil.copy(afc.cwd / "data" / "afc.db", afc.cwd / "archive" / "afc.db")
    env = {"AFC_LOCAL_CALL_LOG": str(log)}
    resumed = afc("resume", "--ledger", "archive/afc.db", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert len(log.read_text().splitlines()) == 3, "a render was paid for again"
    assert len(list(old_spool.glob("*.spool"))) == 3
    first = afc("resume", "--ledger", "data/afc.db", env=env)
    assert first.returncode == 0, first.stderr
    assert len(log.read_text().splitlines()) == 3, "a render was paid for again"
    assert list(old_spool.glob("*.spool")) == []


def test_a_file_in_the_old_folder_that_is_not_the_render_is_left_alone(afc):
    """Bytes other than the checkpointed ones are no render of the job: never copied nor
    stored; the job is SPOOL_MISSING as before, the file left where it is."""
    log = afc.cwd / "calls.log"
    (afc.cwd / "data").mkdir()
    _left_at_store(afc, "data/afc.db", log)
    old_spool = afc.cwd / "data" / "afc.db-spool"
    for path in old_spool.glob("*.spool"):
        path.write_bytes(b"not the render")
    (afc.cwd / "archive").mkdir()
    (afc.cwd / "data" / "afc.db").rename(afc.cwd / "archive" / "afc.db")
    resumed = afc("resume", "--ledger", "archive/afc.db", env={"AFC_LOCAL_CALL_LOG": str(log)})
    assert resumed.returncode == 1
    assert "SPOOL_MISSING" in afc("status", "--ledger", "archive/afc.db").stdout
    assert len(log.read_text().splitlines()) == 3
    assert not (afc.outputs() / "b1").exists() or not list((afc.outputs() / "b1").glob("*.png"))
    assert [p.read_bytes() for p in old_spool.glob("*.spool")] == [b"not the render"] * 3
