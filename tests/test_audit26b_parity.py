"""Outside audit 26b: the same ledger says the same things on SQLite and on PostgreSQL.

Each test runs one scenario through the real ``afc`` against a SQLite ledger and a PostgreSQL
one, and compares what a person reads. The PostgreSQL database here is made as most servers
make theirs (en-US collation, ICU's or the C library's); the suite's own server is initialised
in the machine's locale, often C, whose order is SQLite's own."""

from __future__ import annotations

import json
import re
import sqlite3
import uuid

import pytest
from conftest import manifest

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest


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


def _tables(ledger: str) -> list[str]:
    if ledger.startswith("postgresql"):
        import psycopg

        with psycopg.connect(ledger, autocommit=True) as conn:
            return [
                row[0]
                for row in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1"
                )
            ]
    with sqlite3.connect(ledger) as conn:
        return [r[0] for r in conn.execute("SELECT name FROM sqlite_master ORDER BY 1")]


@pytest.mark.parametrize("theirs", [["jobs", "users"], ["users"]])
def test_another_applications_database_is_refused_untouched_on_both_engines(
    afc, tmp_path, pg_server, theirs
):
    """A ledger URL naming another application's database (its tables, no afc migrations) is
    refused, exit 2, naming its tables, and left as it was: on SQLite as before, now on
    PostgreSQL too, where a submit created afc's tables beside that application's (or, with
    a table of its own named ``jobs``, stopped with "unexpected error: DuplicateTable ... (a
    bug in afc)", exit 1, and ``afc plan`` with UndefinedTable), and ``afc status`` said
    there was no ledger."""
    sqlite_ledger = str(tmp_path / "app.db")
    with sqlite3.connect(sqlite_ledger) as conn:
        for table in theirs:
            conn.execute(f"CREATE TABLE {table} (id INTEGER)")
    pg_ledger = pg_server.database(migrated=False)
    import psycopg

    with psycopg.connect(pg_ledger, autocommit=True) as conn:
        for table in theirs:
            conn.execute(f"CREATE TABLE {table} (id BIGINT)")
    afc.write_manifest(manifest([{"key": "k1", "prompt": "p"}]))
    for ledger, kind in ((sqlite_ledger, "SQLite"), (pg_ledger, "PostgreSQL")):
        for args in (("plan", "manifest.yaml"), ("submit", "manifest.yaml"), ("status",)):
            result = afc(*args, env={"AFC_LEDGER": ledger})
            assert result.returncode == 2, (args, result.stderr)
            assert (
                f"is a {kind} database with other tables ({', '.join(theirs)}), not an afc "
                "ledger; afc left it untouched" in result.stderr
            ), (args, result.stderr)
            assert "bug in afc" not in result.stderr
        assert _tables(ledger) == theirs
    assert not (afc.cwd / "afc-outputs").exists()


def test_an_extensions_views_are_not_another_applications_tables(afc, pg_server):
    """A new database whose only relations are an extension's (pg_stat_statements' views,
    which many managed servers install in every database) is an empty one: afc makes its
    ledger there."""
    import psycopg

    database = pg_server.database(migrated=False)
    with psycopg.connect(database, autocommit=True) as conn:
        try:
            conn.execute("CREATE EXTENSION pg_stat_statements")
        except psycopg.Error:
            pytest.skip("the test server has no pg_stat_statements")
    env = {"AFC_LEDGER": database}
    afc.write_manifest(manifest([{"key": "k1", "prompt": "p"}]))
    result = afc("submit", "manifest.yaml", env=env)
    assert result.returncode == 0, result.stderr
    assert afc.json("status", env=env)["counts"] == {"succeeded": 1}


def test_a_schema_of_its_own_in_another_applications_database_holds_a_ledger(afc, pg_server):
    """What the refusal proposes works: afc's tables in a schema of their own, named by the
    URL's search_path, beside the application's tables, which stay as they were."""
    import psycopg

    database = pg_server.database(migrated=False)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE users (id BIGINT)")
        conn.execute("CREATE SCHEMA renders")
    env = {"AFC_LEDGER": database + "?options=-csearch_path%3Drenders"}
    afc.write_manifest(manifest([{"key": "k1", "prompt": "p"}]))
    result = afc("submit", "manifest.yaml", env=env)
    assert result.returncode == 0, result.stderr
    assert afc.json("status", env=env)["counts"] == {"succeeded": 1}
    assert _tables(database) == ["users"]


@pytest.mark.parametrize("command", ["resume", "worker"])
def test_runs_take_the_batches_in_one_order_on_both_engines(afc, any_ledger, command):
    """``afc resume`` and ``afc worker`` take a ledger's batches in code point order (runs go
    in (batch, seq) order, docs/ledger.md), SQLite's, on PostgreSQL too: on an en-US
    database they took 'alpha' before 'Zeta', so a budget that ran out after one render paid
    for another batch's job on each engine."""
    env = {"AFC_LEDGER": any_ledger}
    _batches(afc)
    for name in ("zeta.yaml", "alpha.yaml"):
        result = afc("submit", name, "--no-run", env=env)
        assert result.returncode == 0, result.stderr
    budget = ["--max-spend", "0.05", "--concurrency", "1"]  # one render at the card's 0.05
    if command == "worker":
        budget += ["--until-idle", "--claim", "1"]
    result = afc(command, *budget, env=env)
    assert result.returncode == 4, result.stderr
    done = [
        (job["batch"], job["key"])
        for job in afc.json("status", "--all", env=env)["jobs"]
        if job["status"] == "succeeded"
    ]
    assert done == [("Zeta", "B")]


@pytest.mark.parametrize("encoding", ["SQL_ASCII", "LATIN1"])
def test_a_database_not_in_utf8_is_refused_before_anything_is_paid(afc, pg_server, encoding):
    """A SQLite ledger holds text in any script. A PostgreSQL database made in SQL_ASCII
    (``initdb`` in a C locale without ``-E UTF8``) or LATIN1 is refused as the ledger's new
    home, exit 2, untouched, and by ``afc plan``: in SQL_ASCII psycopg reads text back as
    bytes, and the submit, its renders paid for, then every command stopped with
    "unexpected error: TypeError ... (a bug in afc)"; in LATIN1 an output key in another
    script stopped the submit with "UnicodeEncodeError ... (a bug in afc)"."""
    import psycopg

    name = f"afc_{uuid.uuid4().hex[:12]}"
    pg_server._admin(
        f"CREATE DATABASE {name} TEMPLATE template0 ENCODING '{encoding}'"
        " LC_COLLATE 'C' LC_CTYPE 'C'"
    )
    ledger = f"{pg_server.prefix}/{name}"
    env = {"AFC_LEDGER": ledger}
    data = manifest([{"key": "k1", "prompt": "p"}])
    data["defaults"]["output"] = "{batch}/写真/{key}.{ext}"
    afc.write_manifest(data)
    for args in (("plan", "manifest.yaml"), ("submit", "manifest.yaml")):
        result = afc(*args, env=env)
        assert result.returncode == 2, (args, result.stderr)
        assert f"is a PostgreSQL database in the {encoding} encoding" in result.stderr
        assert "needs a UTF8 database" in result.stderr
    with psycopg.connect(ledger, autocommit=True) as conn:
        assert (
            conn.execute("SELECT COUNT(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()[0]
            == 0
        )
    assert not (afc.cwd / "afc-outputs").exists()


# what differs between two runs of one scenario whatever the engine: times, durations, ages,
# ids made at random, and the folders of the test's own ledgers and spools
VOLATILE = {
    "duration_s",
    "waited_s",
    "age_s",
    "oldest_age_seconds",
    "oldest_review_age_seconds",
    "run_id",
    "dir",
}
_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


def _steady(value, cwd: str):
    if isinstance(value, dict):
        return {k: _steady(v, cwd) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_steady(item, cwd) for item in value]
    if isinstance(value, str):
        return _ISO.sub("<time>", value.replace(cwd, "<cwd>"))
    return value


def test_one_scenario_reads_the_same_on_both_engines(tmp_path, pg_server):
    """The parity check: the same scenario (two batches, needs, a review gate, failures, a
    retry, a cancel, a decision, a resume) through the real ``afc`` on a SQLite ledger and on
    an en-US PostgreSQL one, compared command by command: exit codes and every ``--json``
    document, times and random ids aside (the jobs' order, money as exact decimals, event
    names, counts). The listings in another order (batches, needs) were such differences."""
    from conftest import Afc

    sides = {}
    for engine in ("sqlite", "postgres"):
        side = Afc(tmp_path / engine)
        side.cwd.mkdir()
        side.env["AFC_LEDGER"] = (
            str(side.cwd / "afc.db") if engine == "sqlite" else collated_database(pg_server)
        )
        _batches(side)
        data = manifest(
            [
                {"key": "r", "prompt": "to review", "review": True},
                {"key": "f", "prompt": "fails", "params": {"fail": ["invalid"]}},
                {"key": "t", "prompt": "times out", "params": {"fail": ["timeout"]}},
            ],
            batch="mixed_1",
        )
        data["defaults"]["chain"][0]["attempts"] = 1
        side.write_manifest(data, "mixed.yaml")
        sides[engine] = side
    script = [
        ("submit", "zeta.yaml"),
        ("submit", "alpha.yaml"),
        ("submit", "mixed.yaml"),
        ("status", "--all"),
        ("outputs",),
        ("show", "a-c"),
        ("show", "t"),
        ("costs", "report"),
        ("costs", "report", "--by", "model"),
        ("costs", "report", "--by", "batch"),
        ("queue", "stats"),
        ("review", "list"),
        ("review", "approve", "r", "--by", "someone"),
        ("retry", "--batch", "mixed_1", "--failed", "--yes"),
        ("cancel", "t"),
        ("resume",),
        ("status", "--all"),
        ("show", "r"),
        ("costs", "report", "--by", "batch"),
    ]
    for args in script:
        seen = []
        for side in sides.values():
            result = side(*args, "--json")
            document = json.loads(result.stdout) if result.stdout.strip() else None
            seen.append((result.returncode, _steady(document, str(side.cwd))))
        assert seen[0] == seen[1], args


@pytest.mark.parametrize("host", ["render\\01", "render_01", "Render%01"])
def test_a_claim_finds_this_hosts_dead_runs_job_whatever_its_host_id(
    afc, ledger_url, monkeypatch, host
):
    """A run's claim takes the jobs of this host's dead runs at once, before free jobs and
    though their leases run on (their renders may be in this host's spool alone), on both
    engines whatever ``AFC_HOST_ID`` holds: it looked for them with ``lease_owner LIKE
    'HOST:%'``, and PostgreSQL's LIKE reads a backslash as an escape, so with a host id such
    as ``render\\01`` it found none; the job waited for its lease to run out and went to any
    host, which paid for its render again."""
    from afc_cli.owner import current_owner

    monkeypatch.setenv("AFC_HOST_ID", host)
    current_owner.cache_clear()
    try:
        path = afc.write_manifest(manifest([{"key": f"k{i}", "prompt": "p"} for i in range(3)]))
        ledger = Ledger(ledger_url)
        try:
            loaded = load_manifest(path)
            ledger.admit(loaded, "file:///tmp/x", RateCards())
            held = loaded.jobs[1].job_id
            with ledger.tx():  # a run of this host that died, its lease running on
                ledger.db.execute(
                    "UPDATE jobs SET lease_owner = ?, lease_expires = 9e18 WHERE id = ?",
                    (f"{host}:999999999:1", held),
                )
            assert [job["key"] for job in ledger.claim_runnable(1, 60)] == ["k1"]
        finally:
            ledger.close()
    finally:
        current_owner.cache_clear()
