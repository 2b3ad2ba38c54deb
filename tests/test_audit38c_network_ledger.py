"""A SQLite ledger on a network file system (outside audit 38c). SQLite's locks cannot be
relied on on an NFS or SMB share ("WAL does not work over a network filesystem"), and two
machines running afc on one such ledger could both claim a job and both pay for it: the
README said nothing of it, and afc ran without a word. A run now warns, once a process, naming
the file system; PostgreSQL is the ledger for several machines. Found from the mount table
(/proc/self/mounts), whose mount points here are written as given below."""

from __future__ import annotations

from pathlib import Path

from conftest import jobs, manifest

from afc_cli import ledger_file, run

MOUNTS = """\
/dev/vda1 / ext4 rw,relatime 0 0
proc /proc proc rw,nosuid 0 0
nas:/export/renders /mnt/renders nfs4 rw,relatime,vers=4.2 0 0
//files/studio\\040share /mnt/studio\\040share cifs rw,relatime 0 0
/dev/vdb1 /mnt/renders/local ext4 rw 0 0
"""


def test_the_network_file_system_a_ledger_is_on_is_read_from_the_mount_table(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text(MOUNTS)

    def on(path: str) -> str | None:
        return ledger_file.network_file_system(Path(path), str(mounts))

    assert on("/mnt/renders/afc.db") == "nfs4"
    assert on("/mnt/renders/jobs/2026/afc.db") == "nfs4"  # a folder that does not exist yet
    assert on("/mnt/studio share/afc.db") == "cifs"  # a mount point with a space (\040)
    assert on("/mnt/renders/local/afc.db") is None  # a local disk mounted inside the share
    assert on("/mnt/renders2/afc.db") is None  # another folder whose name begins alike
    assert on("/home/studio/afc.db") is None
    assert ledger_file.network_file_system(Path("/x/afc.db"), str(tmp_path / "none")) is None


class Said:
    def __init__(self):
        self.notices: list[str] = []

    def __getattr__(self, name):  # every other Reporter call: nothing to see
        return lambda *args, **kwargs: None

    def notice(self, message: str) -> None:
        self.notices.append(message)


def test_a_run_on_a_ledger_on_a_network_share_warns_once(afc, monkeypatch):
    found = []

    def network(path, mounts="/proc/self/mounts"):
        found.append(path)
        return "nfs4"

    monkeypatch.setattr(ledger_file, "network_file_system", network)
    monkeypatch.setattr(run, "_NETWORK_SAID", set())
    ledger = str(afc.cwd / "afc.db")
    said = Said()
    for n in (1, 2):  # two runs of one process (a worker's rounds): said once
        path = afc.write_manifest(manifest(jobs(n)))
        result = run.submit(
            str(path),
            ledger_path=ledger,
            storage=f"file://{afc.cwd / 'out'}",
            concurrency=1,
            reporter=said,
        )
        assert result.exit_code == 0
    warned = [n for n in said.notices if "network file system" in n]
    assert len(warned) == 1, said.notices
    assert f"the ledger {ledger} is on a network file system (nfs4)" in warned[0]
    assert "both pay for one job" in warned[0] and "PostgreSQL" in warned[0]
    assert found == [Path(ledger)]


def test_a_run_on_a_local_disk_says_nothing_of_it(afc, monkeypatch):
    monkeypatch.setattr(run, "_NETWORK_SAID", set())
    said = Said()
    path = afc.write_manifest(manifest(jobs(1)))
    run.submit(
        str(path),
        ledger_path=str(afc.cwd / "afc.db"),
        storage=f"file://{afc.cwd / 'out'}",
        concurrency=1,
        reporter=said,
    )
    assert not [n for n in said.notices if "network file system" in n], said.notices
