"""Outside audit 51c: an afc that migrates an existing ledger says so.

Any command that opens a ledger applies this afc's migrations to it (README, "Upgrading afc"):
an 'afc status' from a laptop with a newer afc, the first cron line after a 'pip install -U'.
It did so without a word, and the older afc of every other host and cron line that uses the
ledger then stopped on it ("migrated by a newer afc", exit 2), the person who had upgraded it
told nothing. Now the migrating command says it, once, on stderr (its --json stdout unchanged):
the versions, the migrations applied, and to upgrade every other user of the ledger. A new
ledger, and a ledger already up to date, say nothing.
"""

from __future__ import annotations

import json

import pytest
from conftest import jobs, manifest
from test_upgrade import LAST, _admitted, _applied

from afc_cli.ledger_file import known_migrations

SAID = "was brought up to this afc's schema"
COUNT = len(known_migrations())


def test_a_migration_of_an_existing_ledger_is_said_once(afc, ledger_url):
    _admitted(afc, ledger_url)  # the ledger as the afc before the last migration left it
    first = afc("status", "--json", "--ledger", ledger_url)
    assert first.returncode == 0, first.stderr
    json.loads(first.stdout)  # stdout is the JSON alone
    lines = [line for line in first.stderr.splitlines() if SAID in line]
    assert len(lines) == 1, first.stderr
    assert (
        LAST in lines[0]
        and f"version {COUNT}, from {COUNT - 1}" in lines[0]
        and "upgrade afc" in lines[0]
    ), lines[0]
    assert LAST in _applied(ledger_url, afc)
    again = afc("status", "--ledger", ledger_url)
    assert again.returncode == 0, again.stderr
    assert SAID not in again.stderr, again.stderr


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
def test_a_new_ledger_is_not_said_migrated(afc, engine, request):
    if engine == "sqlite":
        url = "afc.db"
    else:
        url = request.getfixturevalue("pg_server").database(migrated=False)
    afc.write_manifest(manifest(jobs(1)))
    result = afc("submit", "manifest.yaml", "--no-run", "--ledger", url)
    assert result.returncode == 0, result.stderr
    assert SAID not in result.stderr, result.stderr
