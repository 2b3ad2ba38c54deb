"""Two hosts' first afc commands against one empty PostgreSQL database at the same instant.

The first to take the migrations' advisory lock makes afc's schema in one transaction; the
other looks for afc's migrations table (none yet), then for tables of another application
(``refuse_foreign``). When the first's transaction committed between those two looks, the
second found afc's own tables, took them for another application's and refused the ledger
the first had just made: "... is a PostgreSQL database with other tables (afc_migrations,
attempts, ...), not an afc ledger", exit 2, on a host whose command had done nothing wrong.
"""

from __future__ import annotations

from afc_cli.ledger import postgres
from afc_cli.ledger.postgres import PostgresLedger
from afc_cli.ledger_file import known_migrations


def test_a_ledger_made_by_another_host_between_the_two_looks_is_opened(pg_server, monkeypatch):
    url = pg_server.database(migrated=False)
    looked = PostgresLedger._applied
    made = []

    def applied_then_made_elsewhere(self):
        found = looked(self)
        if not made:  # the other host's migrations commit right after this look
            made.append(True)
            PostgresLedger(url).close()
        return found

    monkeypatch.setattr(PostgresLedger, "_applied", applied_then_made_elsewhere)
    ledger = PostgresLedger(url)
    try:
        assert made
        assert set(ledger._applied()) == set(known_migrations())  # opened, schema complete
    finally:
        ledger.close()


def test_a_plan_reading_as_the_ledger_is_made_elsewhere_reads_it(pg_server, monkeypatch):
    url = pg_server.database(migrated=False)
    foreign = postgres.refuse_foreign
    made = []

    def made_elsewhere_first(conn, path):
        if not made:
            made.append(True)
            PostgresLedger(url).close()
        return foreign(conn, path)

    monkeypatch.setattr(postgres, "refuse_foreign", made_elsewhere_first)
    storage, _endpoint, jobs, needs, moved, _history, _answers, _marked = (
        PostgresLedger.read_admitted(url, "b1")
    )
    assert made and jobs == {} and needs == {} and moved is None
