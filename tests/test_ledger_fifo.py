"""A ledger path naming a FIFO or a device is refused at once, exit 2, nothing written.

SQLite's open of a FIFO waits for a writer that never comes: 'afc submit --ledger FIFO' and
'afc plan --ledger FIFO' hung there, deaf to SIGTERM (the signal handlers are set up after the
ledger is open), and the other commands called a FIFO or /dev/null 'damaged or not a SQLite
database', with 'sqlite3 FIFO .recover' to run (outside audit 32f's report)."""

from __future__ import annotations

import os

import pytest
from conftest import jobs, manifest

COMMANDS = [
    ("submit", "manifest.yaml"),
    ("plan", "manifest.yaml"),
    ("resume",),
    ("status",),
    ("outputs",),
    ("queue", "stats"),
    ("costs", "report"),
    ("worker", "--until-idle"),
]


@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(a) for a in COMMANDS])
def test_a_fifo_ledger_is_refused_without_waiting(afc, args):
    afc.write_manifest(manifest(jobs(1)))
    fifo = afc.cwd / "ledger.fifo"
    os.mkfifo(fifo)
    result = afc(*args, "--ledger", str(fifo), timeout=60)
    assert result.returncode == 2, result.stderr
    assert "is not a regular file (a FIFO, a device or a socket)" in result.stderr
    assert "Traceback" not in result.stderr and "damaged" not in result.stderr
    assert sorted(p.name for p in afc.cwd.iterdir()) == ["ledger.fifo", "manifest.yaml"]


def test_a_device_ledger_is_refused(afc):
    afc.write_manifest(manifest(jobs(1)))
    for args in (("submit", "manifest.yaml"), ("status",), ("ledger", "copy", "/dev/null", "x")):
        result = afc(*args, "--ledger", "/dev/null") if args[0] != "ledger" else afc(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert "/dev/null is not a regular file" in result.stderr, result.stderr
