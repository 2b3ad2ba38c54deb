"""Outside audit 55e: ``_path_not_option`` refuses a path option's value that starts with '-'
(``afc submit m.yaml --ledger --json``: click hands the next option over as the path). It
refused ``AFC_LEDGER`` too, where no option can be taken for the value: a studio whose ledger
file is named ``-night.db`` and set in its environment was told "'-night.db' is an option,
not a path", exit 2, for every command, though no option was given at all."""

from __future__ import annotations

from conftest import jobs, manifest


def test_a_ledger_named_with_a_dash_in_afc_ledger_is_the_ledger(afc):
    path = afc.write_manifest(manifest(jobs(1)))
    result = afc("submit", str(path), env={"AFC_LEDGER": "-night.db"})
    assert result.returncode == 0, result.stderr
    assert (afc.cwd / "-night.db").exists()
    status = afc("status", "--json", env={"AFC_LEDGER": "-night.db"})
    assert status.returncode == 0, status.stderr


def test_the_same_value_on_the_command_line_is_still_refused(afc):
    path = afc.write_manifest(manifest(jobs(1)))
    result = afc("submit", str(path), "--ledger", "-night.db")
    assert result.returncode == 2
    assert "is an option, not a path" in result.stderr
