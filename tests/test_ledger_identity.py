"""Which file is a ledger (issue 12): afc stamps its ledgers, refuses another application's
database and a newer afc's ledger untouched, refuses URL schemes it does not handle, and turns
read-only, damaged and impossible ledger paths into one line and exit 2 — all through the real
command, with nothing written."""

from __future__ import annotations

import hashlib
import random
import sqlite3

import pytest
from conftest import in_mount_namespace, jobs, manifest, need_mount_namespace

from afc_cli.ledger import Ledger
from afc_cli.ledger_file import APPLICATION_ID, known_migrations


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def one_line(result) -> str:
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_new_ledger_is_stamped_with_afcs_id_and_schema_version(tmp_path):
    Ledger(tmp_path / "new.db").close()
    conn = sqlite3.connect(tmp_path / "new.db")
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(known_migrations())


def test_a_ledger_from_before_the_stamp_is_stamped_and_used(tmp_path):
    from sqlite_utils import Database

    from afc_cli.migrations import migrations

    old = tmp_path / "old.db"
    migrations.apply(Database(old))
    assert sqlite3.connect(old).execute("PRAGMA application_id").fetchone()[0] == 0
    Ledger(old).close()
    assert sqlite3.connect(old).execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID


@pytest.mark.parametrize("kind", ["tables", "application_id"])
def test_another_applications_database_is_refused_untouched(afc, kind):
    afc.write_manifest(manifest(jobs(1)))
    conn = sqlite3.connect(afc.cwd / "afc.db")
    if kind == "tables":
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        conn.execute("INSERT INTO notes (body) VALUES ('keep me')")
    else:
        conn.execute("PRAGMA application_id = 1234")
    conn.commit()
    conn.close()
    before = digest(afc.cwd / "afc.db")
    for command in (["submit", "manifest.yaml"], ["plan", "manifest.yaml"], ["status"]):
        result = afc(*command)
        assert result.returncode == 2, result.stderr
        assert "not an afc ledger" in one_line(result)
        assert digest(afc.cwd / "afc.db") == before
        assert not (afc.cwd / "afc.db-wal").exists()
    assert not afc.outputs().exists()


def test_a_ledger_newer_than_this_afc_is_refused_naming_both_versions(afc):
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    conn = sqlite3.connect(afc.cwd / "afc.db")
    conn.execute(
        "INSERT INTO _sqlite_migrations (migration_set, name, applied_at) "
        "VALUES ('afc', 'm099_from_the_future', 'later')"
    )
    conn.execute("PRAGMA user_version = 99")
    conn.commit()
    conn.close()
    before = digest(afc.cwd / "afc.db")
    for command in (["submit", "manifest.yaml"], ["resume"], ["status"]):
        result = afc(*command)
        assert result.returncode == 2
        line = one_line(result)
        assert f"schema version 99, newer than this afc's ({len(known_migrations())}" in line
        assert "m099_from_the_future" in line
        assert digest(afc.cwd / "afc.db") == before


def test_ledger_urls_other_than_sqlite_are_refused_not_taken_for_a_folder(afc):
    afc.write_manifest(manifest(jobs(1)))
    result = afc("submit", "manifest.yaml", "--ledger", "mysql://x/y")
    assert result.returncode == 2
    assert "not supported" in one_line(result)
    assert list(afc.cwd.iterdir()) == [afc.cwd / "manifest.yaml"]
    # a PostgreSQL URL is a PostgreSQL ledger: a server that does not answer is one line,
    # exit 1 (tests/test_audit28b_ledger_down.py), naming the ledger without its password,
    # and nothing is written here
    for url in ("postgresql://afc:s3cret@127.0.0.1:1/afc", "postgres://afc:s3cret@127.0.0.1:1/y"):
        result = afc("submit", "manifest.yaml", "--ledger", url)
        assert result.returncode == 1
        line = one_line(result)
        assert "cannot connect to the ledger" in line and "127.0.0.1:1" in line
        assert "s3cret" not in result.stderr + result.stdout
        assert list(afc.cwd.iterdir()) == [afc.cwd / "manifest.yaml"]
    status = afc("status", "--ledger", "postgresql://afc@127.0.0.1:1/afc")
    assert status.returncode == 1 and "cannot connect" in status.stderr
    # a ledger's folder is not created: a mistyped path or an unmounted volume in a cron
    # line would start a new, empty ledger that pays again for every job not found stored
    result = afc("submit", "manifest.yaml", "--ledger", "sqlite:///books/afc.db")
    assert result.returncode == 2 and "the folder books does not exist" in one_line(result)
    assert list(afc.cwd.iterdir()) == [afc.cwd / "manifest.yaml"]
    (afc.cwd / "books").mkdir()
    result = afc("submit", "manifest.yaml", "--ledger", "sqlite:///books/afc.db")
    assert result.returncode == 0, result.stderr
    assert (afc.cwd / "books" / "afc.db").exists()
    assert afc("status", "--ledger", f"sqlite:///{afc.cwd}/books/afc.db").returncode == 0


def test_a_ledger_path_under_a_regular_file_is_one_line_and_nothing_written(afc):
    afc.write_manifest(manifest(jobs(1)))
    (afc.cwd / "notes").write_text("a file")
    result = afc("submit", "manifest.yaml", "--ledger", "notes/afc.db")
    assert result.returncode == 2
    assert "notes is a file, not a folder" in one_line(result)
    assert not afc.outputs().exists()


def test_a_ledger_with_damaged_pages_is_refused_before_the_run(afc):
    afc.write_manifest(manifest(jobs(300)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    path = afc.cwd / "afc.db"
    data = bytearray(path.read_bytes())
    assert len(data) > 64 * 1024
    rng = random.Random(12)
    for i in range(len(data) // 2, len(data) // 2 + 16 * 1024):
        data[i] = rng.randrange(256)
    path.write_bytes(bytes(data))
    before = digest(path)
    for command in (["submit", "manifest.yaml"], ["resume"]):
        result = afc(*command)
        assert result.returncode == 2, result.stderr
        assert "is damaged" in one_line(result)
        assert digest(path) == before
    assert not afc.outputs().exists()


def test_a_read_only_ledger_is_one_line_and_exit_2(afc):
    need_mount_namespace()
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    (afc.cwd / "ro").mkdir()
    script = (
        f"mount -t tmpfs tmpfs ro && cp afc.db ro/ && mount -o remount,ro ro && "
        f"{' '.join(afc.command('submit', 'manifest.yaml', '--ledger', 'ro/afc.db'))}; "
        f"echo rc=$?; {' '.join(afc.command('resume', '--ledger', 'ro/afc.db'))}; echo rc=$?"
    )
    result = in_mount_namespace(afc, script)
    assert result.stdout.split() == ["rc=2", "rc=2"], result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2 and all("is read-only" in line for line in lines), result.stderr
    assert "Traceback" not in result.stderr


def test_a_failed_storage_check_creates_no_ledger(afc):
    afc.write_manifest(manifest(jobs(1)))
    (afc.cwd / "taken").write_text("a file where the storage folder should be")
    result = afc("submit", "manifest.yaml", "--storage", "file://taken")
    assert result.returncode == 2
    assert not (afc.cwd / "afc.db").exists()


def test_the_storage_check_covers_the_folders_the_batch_writes(afc):
    data = manifest([{"key": "a", "prompt": "p", "output": "x/a.png"}, *jobs(2)])
    afc.write_manifest(data)
    afc.outputs().mkdir()
    (afc.outputs() / "x").write_text("a file where a folder is needed")
    calls = afc.cwd / "calls.log"
    result = afc("submit", "manifest.yaml", env={"AFC_LOCAL_CALL_LOG": str(calls)})
    assert result.returncode == 2, result.stderr
    assert "x is a file, not a folder" in one_line(result)
    assert not (afc.cwd / "afc.db").exists()
    assert not calls.exists()  # nothing rendered, nothing paid
    # admitted earlier, the folder broken since: resume refuses before rendering too
    (afc.outputs() / "x").unlink()
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    (afc.outputs() / "x").write_text("again")
    result = afc("resume", env={"AFC_LOCAL_CALL_LOG": str(calls)})
    assert result.returncode == 2 and "x is a file, not a folder" in result.stderr
    assert not calls.exists()


def test_check_keys_looks_once_per_folder_and_names_the_obstacle(tmp_path):
    from afc_cli.errors import UsageError
    from afc_cli.storage.file import FileStorage

    store = FileStorage(tmp_path / "out")
    keys = [f"b/{i}.png" for i in range(100)] + ["x/y/z.png", "top.png"]
    store.check_keys(keys)  # nothing exists yet: every folder can be made
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("a file")
    with pytest.raises(UsageError, match=r"out/x is a file, not a folder"):
        store.check_keys(keys)
    (tmp_path / "out" / "x").unlink()
    (tmp_path / "out" / "b" / "7.png").mkdir(parents=True)
    with pytest.raises(UsageError, match=r"'b/7.png'.*is a folder"):
        store.check_keys(keys)
    (tmp_path / "out" / "b" / "7.png").rmdir()
    store.check_keys(keys)


def test_a_damage_report_of_several_lines_is_one_line():
    """SQLite's quick_check may put several findings in one row: the message stays one line."""
    from pathlib import Path

    from afc_cli.errors import LedgerError
    from afc_cli.ledger_file import check_pages

    class Damaged:
        def execute(self, sql):
            return [("*** in database main ***\nPage 42: btreeInitPage() returns error 11",)]

    with pytest.raises(LedgerError) as caught:
        check_pages(Damaged(), Path("afc.db"))
    assert "\n" not in caught.value.message
    assert "*** in database main *** Page 42" in caught.value.message


def test_a_reading_command_writes_nothing_into_an_empty_file(afc):
    """Found by an outside audit: 'afc status --ledger empty.db' on a 0-byte file wrote a
    100 KB schema into it and listed no job, exit 0."""
    (afc.cwd / "empty.db").touch()
    for args in (("status",), ("outputs",), ("queue", "stats"), ("costs", "report")):
        result = afc(*args, "--ledger", "empty.db")
        assert result.returncode == 2, (args, result.stderr)
        assert "no ledger at empty.db (the file is empty" in result.stderr
    assert (afc.cwd / "empty.db").stat().st_size == 0
    assert sorted(p.name for p in afc.cwd.iterdir()) == ["empty.db"]
    # a submit makes it a ledger, as it would a missing file
    from conftest import jobs, manifest

    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml", "--ledger", "empty.db").returncode == 0
    assert afc("status", "--ledger", "empty.db").returncode == 0
