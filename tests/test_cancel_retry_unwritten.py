"""``afc retry`` and ``afc cancel`` change jobs one transaction each, outside any run. On a
ledger they could not write (SQLite's write lock held past the busy timeout by another
process, a full disk, a PostgreSQL connection lost) or interrupted (Ctrl-C) they said a
run's words, 'The run stopped; every job stays resumable ... then run afc resume' and
'interrupted; every job stays resumable (run afc resume)': no run had stopped, and 'afc
resume' retries and cancels nothing (a job meant to be cancelled was then run and paid for).
They now say which part was made and to run the command again for the rest (noted by outside
audit 22a)."""

from __future__ import annotations

import sqlite3

import pytest
from conftest import jobs, manifest
from typer.testing import CliRunner

from afc_cli.cli import app
from afc_cli.ledger import Ledger


def _said(result) -> str:
    return " ".join(result.output.split())


@pytest.mark.parametrize("command", ["cancel", "retry"])
def test_a_locked_ledger_says_what_was_not_changed(afc, monkeypatch, command):
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "--no-run", "manifest.yaml").returncode == 0
    if command == "retry":
        assert afc("cancel", "shot-001").returncode == 0
    monkeypatch.setattr("afc_cli.ledger.sqlite.BUSY_TIMEOUT_S", 0.2)
    args = [command, "shot-001", "--ledger", str(afc.cwd / "afc.db")]
    holder = sqlite3.connect(afc.cwd / "afc.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        result = CliRunner().invoke(app, args)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert result.exit_code == 1, result.output
    said = _said(result)
    assert "database is locked; each job's " + command in said, said
    assert f"then {command} those again" in said, said
    assert "afc resume" not in said and "The run stopped" not in said, said
    was = "queued" if command == "cancel" else "cancelled"
    assert afc.rows("SELECT status FROM jobs") == [(was,)]
    assert afc(command, "shot-001").returncode == 0


@pytest.mark.parametrize("command", ["cancel", "retry"])
def test_an_interrupted_change_says_to_run_it_again_not_to_resume(afc, monkeypatch, command):
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "--no-run", "manifest.yaml").returncode == 0
    if command == "retry":
        assert afc("cancel", "shot-001").returncode == 0

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(Ledger, command, interrupted)
    result = CliRunner().invoke(app, [command, "shot-001", "--ledger", str(afc.cwd / "afc.db")])
    assert result.exit_code == 130, result.output
    said = _said(result)
    assert f"interrupted; each job's {command} is its own transaction" in said, said
    assert "afc resume" not in said, said
