"""A SQLite ledger's path may start with '~', the home folder (afc_cli/ledger_file.py
``ledger_path``), as AFC_SPOOL_DIR and a file:// storage may: systemd's Environment= and
crontab lines do not expand it."""

from __future__ import annotations

import json

from conftest import jobs, manifest


def test_a_ledger_under_the_home_folder_is_expanded(afc):
    """AFC_LEDGER=~/afc.db was refused as a ledger whose folder '~' does not exist, without
    saying that '~' was the reason; it is the home folder's ledger, the one a shell's
    'afc --ledger ~/afc.db' names, and every command reads the same file."""
    afc.write_manifest(manifest(jobs(2)))
    home = afc.cwd / "home"
    home.mkdir()
    env = {"AFC_LEDGER": "~/afc.db", "HOME": str(home)}
    result = afc("submit", "manifest.yaml", env=env)
    assert result.returncode == 0, result.stderr
    assert (home / "afc.db").is_file() and not (afc.cwd / "~").exists()
    shell = afc("status", "--json", "--ledger", str(home / "afc.db"), env={"HOME": str(home)})
    assert shell.returncode == 0 and json.loads(shell.stdout)["counts"] == {"succeeded": 2}


def test_a_ledger_under_a_home_folder_that_cannot_be_found_is_refused(afc):
    afc.write_manifest(manifest(jobs(1)))
    result = afc("submit", "manifest.yaml", env={"AFC_LEDGER": "~no-such-user-afc/afc.db"})
    assert result.returncode == 2, result.stderr
    assert "'~no-such-user-afc' names no home folder here" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (afc.cwd / "~no-such-user-afc").exists()
