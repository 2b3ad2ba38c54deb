"""Outside audit 23h: the ledger as a file over time (a copy of a damaged ledger, ...), through
the real ``afc`` command."""

from __future__ import annotations

import hashlib
import random
import shlex
import shutil
import subprocess
import sys

import pytest
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


def test_a_copy_onto_a_full_disk_says_nothing_was_copied_and_to_copy_again(afc):
    """A copy whose destination's disk filled part-way (its one transaction rolled back) said a
    run's words, 'The run stopped; every job stays resumable ...: free space on its disk, then
    run afc resume': a resume on the source, unmoved, runs its jobs there, not what the person
    copying wanted. It now says nothing was copied and to copy again, naming the ledger that
    could not be written."""
    if sys.platform != "linux" or not shutil.which("unshare"):
        pytest.skip("needs unshare (Linux)")
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("unprivileged mount namespaces are not available")
    data = manifest([{"key": f"k{i:04d}", "prompt": "x" * 200 + str(i)} for i in range(2000)])
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    before = _digest(afc.cwd / "afc.db")
    (afc.cwd / "full").mkdir()
    command = " ".join(shlex.quote(part) for part in afc.command("ledger", "copy", "afc.db"))
    result = subprocess.run(
        [
            "unshare",
            "-rm",
            "sh",
            "-c",
            f"mount -t tmpfs -o size=300k tmpfs full && {command} full/new.db",
        ],
        cwd=afc.cwd,
        env=afc.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in result.stderr
    assert result.returncode == 1, result.stderr
    assert "full" in result.stderr and "nothing was copied" in result.stderr.lower()
    assert "afc resume" not in result.stderr, result.stderr
    assert "full/new.db" in result.stderr
    # the source is as it was and still runs: nothing moved it
    assert _digest(afc.cwd / "afc.db") == before
    assert afc.json("status").get("moved_to") is None


def _in_namespace(afc, script: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", script],
        cwd=afc.cwd,
        env=afc.env,
        capture_output=True,
        text=True,
        timeout=120,
    )


OLDER = (
    "import sqlite3, sys\n"
    "c = sqlite3.connect(sys.argv[1])\n"
    "c.execute('DROP INDEX jobs_output_spooled')\n"
    "c.execute(\"DELETE FROM _sqlite_migrations WHERE name = 'm014_output_key_spooled'\")\n"
    "c.execute('PRAGMA user_version = 13')\n"
    "c.commit()\n"
    "c.execute('PRAGMA wal_checkpoint(TRUNCATE)')\n"
    "c.close()\n"
)


def test_a_ledger_that_cannot_be_made_or_migrated_on_a_full_disk_is_not_called_damaged(afc):
    """A ledger an afc had to migrate (an upgrade) on a disk with no room left, or a new one
    made there, was refused as 'damaged or not a SQLite database (disk I/O error); restore it
    from a backup, or recover it with sqlite3 .recover': the file was whole (the migration's
    transaction rolled back), and a person restoring a backup over it loses every job and
    paid attempt recorded since. It now says the disk is full, nothing was written, and to free
    space and run again; once there is room the same command migrates and reads it."""
    if sys.platform != "linux" or not shutil.which("unshare"):
        pytest.skip("needs unshare (Linux)")
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("unprivileged mount namespaces are not available")
    afc.write_manifest(manifest(jobs(300)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    (afc.cwd / "older.py").write_text(OLDER)
    (afc.cwd / "full").mkdir()
    python = shlex.quote(afc.command()[0])
    status = " ".join(shlex.quote(p) for p in afc.command("status", "--ledger", "full/l.db"))
    new = " ".join(
        shlex.quote(p)
        for p in afc.command("submit", "manifest.yaml", "--no-run", "--ledger", "full/new.db")
    )
    result = _in_namespace(
        afc,
        "mount -t tmpfs -o size=1500k tmpfs full && cp afc.db full/l.db"
        f" && {python} older.py full/l.db"
        " && { dd if=/dev/zero of=full/fill bs=4k 2>/dev/null; true; }"
        f" && {{ {status}; echo status=$?; {new}; echo new=$?; rm full/fill;"
        f" {status} >/dev/null; echo freed=$?; }}",
    )
    assert "Traceback" not in result.stderr
    assert "status=2" in result.stdout and "new=2" in result.stdout, result.stdout
    lines = result.stderr.strip().splitlines()[:2]  # then the freed status's summary
    for line in lines:
        assert "disk is full" in line and "free space" in line, line
        assert "damaged" not in line and "backup" not in line, line
    assert "freed=0" in result.stdout, result.stderr


def test_a_ledger_locked_while_it_is_migrated_is_not_called_damaged(afc, monkeypatch):
    """A ledger a newer afc had to migrate while another process held its write lock past the
    busy timeout (a sqlite3 shell or a backup script in an open transaction) was refused, by
    afc status too, as 'damaged or not a SQLite database (database is locked); restore it from
    a backup': nothing was wrong with it, and restoring a backup over it loses what it holds
    since. It now names the lock and what to end."""
    import sqlite3

    from afc_cli.errors import LedgerError
    from afc_cli.ledger import sqlite as engine

    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    path = afc.cwd / "afc.db"
    (afc.cwd / "older.py").write_text(OLDER)
    assert subprocess.run([afc.command()[0], "older.py", str(path)], cwd=afc.cwd).returncode == 0
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        monkeypatch.setattr(engine, "BUSY_TIMEOUT_S", 0.1)
        with pytest.raises(LedgerError) as refused:
            engine.SqliteLedger(path, create=False)
    finally:
        holder.close()
    message = str(refused.value)
    assert "damaged" not in message and "backup" not in message, message
    assert "lock" in message and "afc.db" in message
    engine.SqliteLedger(path, create=False).close()  # the lock gone, it migrates


def test_webhooks_deliver_on_a_ledger_it_cannot_write_says_to_deliver_again(afc, monkeypatch):
    """'afc webhooks deliver' whose ledger could not be written (another process held its
    write lock past the busy timeout; a full disk) said a run's words, 'The run stopped;
    every job stays resumable ...: end it, then run afc resume': it ran no job, and a resume
    is not what delivers the events on time for a cron'd drain. It now says to run it again."""
    import sqlite3

    from typer.testing import CliRunner

    from afc_cli.cli import app
    from afc_cli.ledger import sqlite as engine

    data = manifest(jobs(1))
    data["webhook"] = {"url": "http://127.0.0.1:9/hook", "secret_env": "AFC_HOOK_SECRET"}
    afc.write_manifest(data)
    secret = {"AFC_HOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
    assert afc("submit", "manifest.yaml", env=secret).returncode == 0
    path = afc.cwd / "afc.db"
    conn = sqlite3.connect(path)
    conn.execute("UPDATE deliveries SET next_attempt_at = 0")  # due now
    conn.commit()
    conn.close()
    monkeypatch.chdir(afc.cwd)
    monkeypatch.setattr(engine, "BUSY_TIMEOUT_S", 0.1)
    monkeypatch.setattr("sys.argv", ["afc", "webhooks", "deliver"])  # what it says to run
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        result = CliRunner().invoke(
            app, ["webhooks", "deliver"], env={**secret, "AFC_LEDGER": str(path)}
        )
    finally:
        holder.close()
    said = result.stderr
    assert result.exit_code == 1, said
    assert "Traceback" not in said and "locked" in said
    assert "afc resume" not in said and "resumable" not in said, said
    assert "webhooks deliver" in said, said
