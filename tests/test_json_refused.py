"""README: a command refused before it did anything prints no JSON under --json, stdout empty,
stderr saying why (a script checks the exit code before it parses stdout)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    "args",
    [
        ("retry", "nothing"),  # no ledger yet
        ("status", "--ledger", "postgresql://127.0.0.1:1/none"),  # no server there
        ("submit", "missing.yaml"),  # no manifest
    ],
)
def test_a_refused_command_prints_no_json(afc, args):
    result = afc(*args, "--json")
    assert result.returncode in (1, 2), result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith("afc: "), result.stderr
    assert "Traceback" not in result.stderr
