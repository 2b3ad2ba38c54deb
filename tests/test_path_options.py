"""A path option followed by another option: click hands the option's word over as the path.

``afc submit m.yaml --ledger --json`` made a ledger file named ``--json`` and ran the batch
into it (the user's own ledger untouched, their next ``afc status`` finding none of it), and
``afc report --html --json`` wrote the report to a file named ``--json`` and said nothing of
JSON. Both are refused as usage errors (exit 2) before anything is written.
"""

from __future__ import annotations

from conftest import jobs, manifest


def test_a_ledger_option_without_its_value_is_refused(afc):
    path = afc.write_manifest(manifest(jobs(2)))
    result = afc("submit", str(path), "--ledger", "--json")
    assert result.returncode == 2, result.stderr
    assert "'--json' is an option, not a path" in result.stderr
    assert "./--json" in result.stderr
    assert sorted(p.name for p in afc.cwd.iterdir()) == ["manifest.yaml"]  # nothing written


def test_a_report_file_without_its_name_is_refused(afc):
    path = afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", str(path)).returncode == 0
    before = sorted(p.name for p in afc.cwd.iterdir())
    result = afc("report", "--html", "--json")
    assert result.returncode == 2, result.stderr
    assert "Invalid value for '--html'" in result.stderr
    assert sorted(p.name for p in afc.cwd.iterdir()) == before


def test_a_file_named_like_an_option_is_reached_through_its_folder(afc):
    path = afc.write_manifest(manifest(jobs(1)))
    result = afc("submit", str(path), "--ledger", "./-night.db")
    assert result.returncode == 0, result.stderr
    assert (afc.cwd / "-night.db").exists()
    assert afc("status", "--ledger", "./-night.db").returncode == 0


def test_a_dash_for_the_ledger_is_refused_not_made_a_ledger_named_dash(afc):
    """``--ledger -`` (stdin or stdout to most commands) made a ledger file named '-'."""
    path = afc.write_manifest(manifest(jobs(1)))
    result = afc("submit", str(path), "--ledger", "-")
    assert result.returncode == 2, result.stderr
    assert "'-' names stdin or stdout, not a file" in result.stderr
    assert sorted(p.name for p in afc.cwd.iterdir()) == ["manifest.yaml"]
