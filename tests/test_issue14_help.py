"""Help snapshots: every command's ``-h`` at 80 columns, as the real ``afc`` prints it.

A change to any help text fails here until the snapshot is looked at and renewed:
``AFC_UPDATE_HELP=1 .venv/bin/python -m pytest tests/test_issue14_help.py`` rewrites the
files under ``tests/help/``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from afc_cli.cli import app

SNAPSHOTS = Path(__file__).resolve().parent / "help"


def command_paths() -> list[tuple[str, ...]]:
    """Every command and group, walked from the real command tree (a new command gets a
    snapshot test without anyone listing it here)."""
    paths: list[tuple[str, ...]] = [()]

    def walk(group, prefix: tuple[str, ...]) -> None:
        for name, command in sorted(group.commands.items()):
            paths.append((*prefix, name))
            if hasattr(command, "commands"):  # a group (typer vendors its own click)
                walk(command, (*prefix, name))

    walk(typer.main.get_command(app), ())
    return paths


def help_text(path: tuple[str, ...]) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AFC_", "NO_COLOR"))}
    env.update(COLUMNS="80", TERM="dumb", LC_ALL="C.UTF-8")
    done = subprocess.run(
        [sys.executable, "-m", "afc_cli", *path, "-h"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("path", command_paths(), ids=lambda p: " ".join(p) or "afc")
def test_help_matches_its_snapshot(path):
    text = help_text(path)
    snapshot = SNAPSHOTS / (("_".join(path) or "afc") + ".txt")
    if os.environ.get("AFC_UPDATE_HELP") == "1":
        snapshot.write_text(text)
    assert snapshot.exists(), f"no snapshot {snapshot.name}: run with AFC_UPDATE_HELP=1"
    assert text == snapshot.read_text(), f"help of 'afc {' '.join(path)}' changed"
    assert "Examples:" in text, "every command's help ends with examples"
    assert "<bool>" not in text and "╭" not in text
    assert all(len(line) <= 80 for line in text.splitlines())


def test_every_command_is_snapshotted_and_no_snapshot_is_stale():
    expected = {("_".join(p) or "afc") + ".txt" for p in command_paths()}
    assert {p.name for p in SNAPSHOTS.glob("*.txt")} == expected
    assert {"status.txt", "outputs.txt", "webhooks_replay.txt", "costs.txt"} <= expected
