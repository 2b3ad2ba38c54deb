"""Outside audit 51f: what a SQLite ledger's write lock held past the busy timeout names.

A newer afc's migration of a large SQLite ledger holds its write lock for as long as it runs
(one transaction). A run, submit or worker of the older afc beside it waits 30 s for that lock
(``sqlite.BUSY_TIMEOUT_S``) and then stops, exit 1, as for any write lock held too long: it
named a sqlite3 shell or a script left in a transaction, never a migration, the likely holder
while hosts are being upgraded. (PostgreSQL's lock wait names it too: 8d3ec8e.)
"""

from __future__ import annotations

import sqlite3

from afc_cli.errors import ledger_write_error


def test_a_sqlite_write_lock_held_too_long_names_a_migration_among_the_holders(tmp_path):
    said = str(
        ledger_write_error(tmp_path / "afc.db", sqlite3.OperationalError("database is locked"))
    )
    assert "sqlite3 shell" in said
    assert "a newer afc migrating the ledger" in said, said
