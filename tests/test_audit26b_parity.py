"""Outside audit 26b: the same ledger says the same things on SQLite and on PostgreSQL.

Each test runs one scenario through the real ``afc`` against a SQLite ledger and a PostgreSQL
one, and compares what a person reads. The PostgreSQL database here is made as most servers
make theirs (en-US collation, ICU's or the C library's); the suite's own server is initialised
in the machine's locale, often C, whose order is SQLite's own."""

from __future__ import annotations

import uuid

import pytest
from conftest import manifest


def collated_database(pg_server) -> str:
    """A new, empty database whose text collation is en-US (not C): ICU's where the server
    has it, else the C library's; skipped when the server has neither."""
    import psycopg

    name = f"afc_{uuid.uuid4().hex[:12]}"
    tries = (
        f"CREATE DATABASE {name} TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US'",
        f"CREATE DATABASE {name} TEMPLATE template0 LC_COLLATE 'en_US.UTF-8'"
        " LC_CTYPE 'en_US.UTF-8'",
    )
    for sql in tries:
        try:
            pg_server._admin(sql)
        except psycopg.Error:
            continue
        return f"{pg_server.prefix}/{name}"
    pytest.skip("the test server has no en-US collation (ICU or the C library's)")


@pytest.fixture(params=["sqlite", "postgres"])
def any_ledger(request, tmp_path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "afc.db")
    return collated_database(request.getfixturevalue("pg_server"))


def _batches(afc) -> None:
    chain = [{"provider": "local", "model": "m1", "attempts": 1}]
    afc.write_manifest(
        manifest(
            [
                {"key": "B", "prompt": "b"},
                {"key": "a", "prompt": "a"},
                {"key": "a-c", "prompt": "c", "needs": ["a", "B"]},
            ],
            batch="Zeta",
            defaults={"chain": chain},
        ),
        "zeta.yaml",
    )
    afc.write_manifest(
        manifest(
            [{"key": "Z9", "prompt": "z"}, {"key": "x_1", "prompt": "x"}],
            batch="alpha",
            defaults={"chain": chain},
        ),
        "alpha.yaml",
    )


def test_batches_and_needs_are_listed_in_one_order_on_both_engines(afc, any_ledger):
    """Listings name their batches (and a job's needs) in code point order, SQLite's: on a
    PostgreSQL database of en-US collation (the default of most servers and managed
    services), 'alpha' came before 'Zeta' and 'a' before 'B', so ``afc status``, ``afc
    outputs`` (its rows are what an edit suite reads, ``tail -n +2 | cut -f2``), ``afc show``
    and a blocked job's reason listed one ledger in another order than the same ledger on
    SQLite, or after ``afc ledger copy``."""
    env = {"AFC_LEDGER": any_ledger}
    _batches(afc)
    for name in ("zeta.yaml", "alpha.yaml"):
        result = afc("submit", name, "--no-run", env=env)
        assert result.returncode == 0, result.stderr

    listed = afc.json("status", "--all", env=env)["jobs"]
    assert [(job["batch"], job["key"]) for job in listed] == [
        ("Zeta", "B"),
        ("Zeta", "a"),
        ("Zeta", "a-c"),
        ("alpha", "Z9"),
        ("alpha", "x_1"),
    ]
    (blocked,) = [job for job in listed if job["key"] == "a-c"]
    assert "B, a" in blocked["waiting"], blocked
    story = afc.json("show", "a-c", "--batch", "Zeta", env=env)
    assert [need["key"] for need in story["needs"]] == ["B", "a"]

    result = afc("resume", env=env)
    assert result.returncode == 0, result.stderr
    outputs = afc.json("outputs", env=env)["outputs"]
    assert [(row["batch"], row["key"]) for row in outputs] == [
        ("Zeta", "B"),
        ("Zeta", "a"),
        ("Zeta", "a-c"),
        ("alpha", "Z9"),
        ("alpha", "x_1"),
    ]
    table = afc("outputs", env=env).stdout.splitlines()[1:]
    assert [line.split("\t")[:2] for line in table] == [
        ["Zeta", "B"],
        ["Zeta", "a"],
        ["Zeta", "a-c"],
        ["alpha", "Z9"],
        ["alpha", "x_1"],
    ]
