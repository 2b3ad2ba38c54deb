"""Outside audit 31h: '--ledger=' (empty) was refused 'the ledger . is a folder'."""

from __future__ import annotations

import pytest
from conftest import manifest


@pytest.mark.parametrize("command", [["submit", "manifest.yaml"], ["status"], ["costs", "report"]])
def test_an_empty_ledger_option_says_it_is_empty(afc, command):
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    calls = afc.cwd / "calls.log"
    for args in (["--ledger="], ["--ledger", ""]):
        result = afc(*command, *args, env={"AFC_LOCAL_CALL_LOG": str(calls)})
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
        assert "--ledger is empty" in result.stderr, result.stderr
        assert "is a folder" not in result.stderr
    assert not calls.exists() or calls.read_text() == ""
    assert not (afc.cwd / "afc.db").exists()
