"""Outside audit 26e: a ledger another build of afc migrated, not a newer one.

A ledger whose migrations include one this afc does not have is refused untouched (exit 2).
When it has no more migrations than this afc, it is no newer afc's: afc's first build (its
m002 was renamed before the next one shipped), or a development or branch build whose migration
was named otherwise when released. It was called 'newer than this afc' ('schema version 2,
newer than this afc's (14)') and the user told to upgrade afc, which would never know it.
"""

from __future__ import annotations

from conftest import jobs, manifest, old_build
from test_upgrade import LAST, NEWER, _sql, newer_bookkeeping

from afc_cli.ledger_file import known_migrations

FIRST_BUILD = "38098ff"  # afc's first build: m001_initial, m002_status_indexes


def _refused_as_another_build(result, name: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    line = result.stderr.strip()
    assert name in line and "another build of afc" in line, line
    assert "newer than this afc" not in line and "upgrade afc" not in line, line


def test_a_branch_builds_migration_is_not_called_newer(afc, ledger_url):
    """The ledger's last migration bears a branch build's name (``m014_e_...``): as many
    migrations as this afc, one of them not this afc's."""
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml", "--no-run", "--ledger", ledger_url).returncode == 0
    table = "afc_migrations" if ledger_url.startswith("postgresql://") else "_sqlite_migrations"
    branch = "m014_e_output_key_spooled"
    _sql(ledger_url, afc, [f"UPDATE {table} SET name = '{branch}' WHERE name = '{LAST}'"])
    result = afc("status", "--ledger", ledger_url)
    _refused_as_another_build(result, branch)
    assert f"schema version {len(known_migrations())}" in result.stderr


def test_a_newer_afcs_ledger_is_still_called_newer(afc, ledger_url):
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml", "--no-run", "--ledger", ledger_url).returncode == 0
    bookkeeping = newer_bookkeeping(ledger_url, len(known_migrations()) + 1)
    _sql(ledger_url, afc, bookkeeping)
    result = afc("status", "--ledger", ledger_url)
    assert result.returncode == 2, result.stderr
    assert NEWER in result.stderr and "newer" in result.stderr, result.stderr
    assert "another build" not in result.stderr, result.stderr


def test_a_ledger_of_afcs_first_build(afc, tmp_path):
    old = old_build(FIRST_BUILD, tmp_path / "first-build")
    afc.write_manifest(manifest(jobs(1)))
    ran = afc("submit", "manifest.yaml", env={"PYTHONPATH": str(old)})
    assert ran.returncode == 0, ran.stderr
    before = (afc.cwd / "afc.db").read_bytes()
    result = afc("status")
    _refused_as_another_build(result, "m002_status_indexes")
    assert (afc.cwd / "afc.db").read_bytes() == before  # untouched
