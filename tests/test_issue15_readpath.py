"""Issue 15, start-up of a command that only reads the ledger: ``afc queue stats`` imports
neither pydantic (typer's option adapters, afc_cli/cli_coercion.py) nor sqlite-utils (the
ledger's own ``Connection``, afc_cli/ledger/sqlite.py), yet refuses a newer schema and a damaged
file as before, migrates an older ledger, and keeps typer's messages for bad option values.
Number options are coerced as typer's adapter would, without it; a resume that runs jobs
imports none of the manifest's machinery (pydantic, YAML, rfc8785). The
oldest-age figures come from the (batch, status, created_at) index (m008)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest
from conftest import jobs, manifest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlite_utils import Database

from afc_cli.ledger import Ledger
from afc_cli.ledger.sqlite import Connection, _first_keyword
from afc_cli.ledger_file import known_migrations
from afc_cli.migrations import migrations

HEAVY = ("pydantic", "sqlite_utils", "yaml", "httpx", "rfc8785")


def imported_by(cwd, *args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run ``afc ARGS`` in a child process and list the heavy modules it imported."""
    code = (
        "import atexit, sys\n"
        f"heavy = {HEAVY!r}\n"
        "atexit.register(lambda: sys.stderr.write('\\nIMPORTED ' + ','.join("
        "sorted(m for m in heavy if m in sys.modules)) + '\\n'))\n"
        f"sys.argv = ['afc', *{list(args)!r}]\n"
        "from afc_cli.cli import main\n"
        "main()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    line = [x for x in result.stderr.splitlines() if x.startswith("IMPORTED ")][-1]
    return result, [m for m in line[len("IMPORTED ") :].split(",") if m]


def test_queue_stats_imports_neither_pydantic_nor_sqlite_utils(afc):
    afc.write_manifest(manifest(jobs(3)))
    assert afc("submit", "manifest.yaml", "--no-run", "-q").returncode == 0
    result, heavy = imported_by(afc.cwd, "queue", "stats", "--json")
    assert result.returncode == 0, result.stderr
    assert heavy == []
    assert '"queued": 3' in result.stdout
    # the same figures with every option typer coerces given a value
    result, heavy = imported_by(
        afc.cwd, "queue", "stats", "--ledger", "afc.db", "--fail-if", "dlq>0"
    )
    assert result.returncode == 0 and "queued\t3\n" in result.stdout
    assert heavy == []


def test_bad_option_values_keep_typers_messages(afc):
    result = afc("queue", "stats", "--concurrency", "many")
    assert result.returncode == 2
    assert "Invalid value for '--concurrency'" in result.stderr
    assert "valid integer" in result.stderr
    result = afc("submit", "x.yaml", "--concurrency", "0")
    assert result.returncode == 2 and "Traceback" not in result.stderr


def test_queue_stats_refuses_a_newer_schema_and_a_damaged_file(afc):
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml", "--no-run", "-q").returncode == 0
    conn = sqlite3.connect(afc.cwd / "afc.db")
    conn.execute(
        "INSERT INTO _sqlite_migrations (migration_set, name, applied_at) "
        "VALUES ('afc', 'm099_from_the_future', 'later')"
    )
    conn.commit()
    conn.close()
    result = afc("queue", "stats")
    assert result.returncode == 2
    assert "newer than this afc" in result.stderr and "m099_from_the_future" in result.stderr
    (afc.cwd / "afc.db").write_bytes(b"this is not sqlite" * 100)
    for name in ("afc.db-wal", "afc.db-shm"):
        (afc.cwd / name).unlink(missing_ok=True)
    result = afc("queue", "stats")
    assert result.returncode == 2
    assert "is damaged or not a SQLite database" in result.stderr
    assert "Traceback" not in result.stderr


def test_queue_stats_migrates_an_older_ledger_as_every_command_does(afc):
    old = afc.cwd / "afc.db"
    db = Database(old)
    migrations.apply(db, stop_before="m008_status_age_index")
    db.close()
    result = afc("queue", "stats", "--json")
    assert result.returncode == 0, result.stderr
    conn = sqlite3.connect(old)
    applied = [r[0] for r in conn.execute("SELECT name FROM _sqlite_migrations ORDER BY rowid")]
    assert applied == known_migrations()
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(known_migrations())
    indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert "jobs_batch_status_age" in indexes and "jobs_batch_status" not in indexes


def test_oldest_ages_come_from_the_index_and_span_batches(tmp_path):
    ledger = Ledger(tmp_path / "afc.db")
    try:
        db = ledger.db
        for name in ("a", "b"):
            db.execute(
                "INSERT INTO batches (name, storage, rates_json, created_at, updated_at)"
                " VALUES (?, 'file:///x', '[]', 0, 0)",
                (name,),
            )
        rows = [
            ("a", "a1", "succeeded", 100.0, None),  # finished: not counted
            ("a", "a2", "queued", 500.0, None),
            ("b", "b1", "waiting", 300.0, None),
            ("b", "b2", "awaiting_review", 200.0, 400.0),
            ("a", "a3", "awaiting_review", 50.0, 700.0),
        ]
        for seq, (batch, key, status, created, review_at) in enumerate(rows):
            db.execute(
                "INSERT INTO jobs (id, batch, key, seq, request_hash, request_json, output_key,"
                " status, step, created_at, updated_at, review_at)"
                " VALUES (?, ?, ?, ?, 'h', '{}', ?, ?, 'probe', ?, ?, ?)",
                (key, batch, key, seq, key, status, created, created, review_at),
            )
        stats = ledger.queue_stats(now=1000.0)
        assert stats["oldest_age_seconds"] == 700  # b1, created at 300
        assert stats["oldest_review_age_seconds"] == 600  # b2, awaiting review since 400
        assert (stats["queued"], stats["delayed"], stats["awaiting_review"]) == (1, 1, 2)
        # the counts and the oldest ages in one read of that index, no job row read (audit
        # 57c: a look-up per batch and status ever admitted grew with the ledger's history)
        plan = " ".join(
            str(row)
            for row in db.execute(
                "EXPLAIN QUERY PLAN SELECT batch, status, COUNT(*), MIN(created_at) FROM jobs"
                " GROUP BY batch, status"
            )
        )
        assert "COVERING INDEX jobs_batch_status_age" in plan, plan
    finally:
        ledger.close()
    empty = Ledger(tmp_path / "empty.db")
    try:
        assert empty.queue_stats()["oldest_age_seconds"] == 0
    finally:
        empty.close()


def test_the_connection_commits_a_lone_write_as_sqlite_utils_does(tmp_path):
    path = tmp_path / "afc.db"
    Ledger(path).close()
    ours, theirs = Connection(sqlite3.connect(path)), Database(sqlite3.connect(path))
    other = sqlite3.connect(path)
    for n, db in enumerate((ours, theirs)):
        db.execute(
            "INSERT INTO batches (name, storage, rates_json, created_at, updated_at)"
            " VALUES (?, 'file:///x', '[]', 0, 0)",
            (f"b{n}",),
        )
        assert not db.conn.in_transaction  # committed at once: another connection sees it
        assert other.execute("SELECT COUNT(*) FROM batches WHERE name = ?", (f"b{n}",)).fetchone()
        with pytest.raises(sqlite3.IntegrityError):
            db.execute(
                "INSERT INTO batches (name, storage, rates_json, created_at, updated_at)"
                " VALUES (?, 'file:///x', '[]', 0, 0)",
                (f"b{n}",),
            )
        assert not db.conn.in_transaction  # the failed statement's transaction is gone
        db.execute("BEGIN IMMEDIATE")
        db.execute("UPDATE batches SET updated_at = 1 WHERE name = ?", (f"b{n}",))
        assert db.conn.in_transaction  # inside an explicit transaction: left open
        db.execute("ROLLBACK")
        db.close()
    other.close()


@pytest.mark.parametrize(
    "sql",
    [
        "BEGIN",
        "  begin immediate",
        "-- note\nCOMMIT",
        "/* x */ ROLLBACK",
        ";; SAVEPOINT a",
        "\ufeffRELEASE a",
        "-- only a comment",
        "/* unterminated",
        "UPDATE jobs SET x = 1",
        "",
        "  ",
        "END",
        "with_x AS",
    ],
)
def test_first_keyword_reads_statements_as_sqlite_utils_does(sql):
    from sqlite_utils.db import _first_keyword as theirs

    assert _first_keyword(sql) == theirs(sql)


def test_an_admission_writes_one_status_index_entry_a_job(afc):
    """The age index replaced the (batch, status) one: a job still costs one entry in it. The
    output-key indexes (m011, m013, m014, m016) are partial, over running, waiting and rendered
    jobs, those queued or dead at their store step and those dead at their render step: an
    admitted job (queued at its probe) has no entry in them. The claim order's (m017) is the
    one other entry an admitted job costs: a worker's claim reads the free runnable jobs from
    it in order, where it sorted them all at every claim. The held jobs' (m024) has only the
    jobs some run holds: none of an admission's."""
    afc.write_manifest(manifest(jobs(5)))
    assert afc("submit", "manifest.yaml", "--no-run", "-q").returncode == 0
    indexes = afc.rows(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'jobs'"
        " AND sql IS NOT NULL ORDER BY name"
    )
    assert [name for name, sql in indexes if " WHERE " not in sql] == ["jobs_batch_status_age"]
    assert [name for name, sql in indexes if " WHERE " in sql] == [
        "jobs_blocked_order",
        "jobs_claim_order",
        "jobs_lease_owner",
        "jobs_leased_order",
        "jobs_output_holders",
        "jobs_output_poll_left",
        "jobs_output_rendering",
        "jobs_output_spooled",
    ]
    free = afc.rows(
        "SELECT COUNT(*) FROM jobs INDEXED BY jobs_claim_order WHERE lease_owner IS NULL"
        " AND status IN ('queued', 'running', 'waiting')"
    )
    assert free == [(5,)]
    queued = afc.rows(
        "SELECT COUNT(*) FROM jobs INDEXED BY jobs_output_holders WHERE status IN"
        " ('running', 'succeeded', 'awaiting_review', 'rejected')"
    )
    assert queued == [(0,)]
    queued = afc.rows(
        "SELECT COUNT(*) FROM jobs INDEXED BY jobs_output_spooled"
        " WHERE step = 'store' AND status IN ('queued', 'dead')"
    )
    assert queued == [(0,)]
    queued = afc.rows(
        "SELECT COUNT(*) FROM jobs INDEXED BY jobs_output_poll_left"
        " WHERE status = 'dead' AND step = 'render'"
    )
    assert queued == [(0,)]
    held = afc.rows(
        "SELECT COUNT(*) FROM jobs INDEXED BY jobs_lease_owner WHERE lease_owner IS NOT NULL"
    )
    assert held == [(0,)]


def test_both_engines_have_the_age_index_and_answer_the_same_figures(ledger_url):
    ledger = Ledger(ledger_url)
    try:
        if ledger_url.startswith("postgresql"):
            names = {
                r[0]
                for r in ledger.db.execute(
                    "SELECT indexname FROM pg_indexes WHERE tablename = ?", ("jobs",)
                )
            }
        else:
            names = {
                r[0]
                for r in ledger.db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
            }
        assert "jobs_batch_status_age" in names and "jobs_batch_status" not in names
        ledger.db.execute(
            "INSERT INTO batches (name, storage, rates_json, created_at, updated_at)"
            " VALUES ('b', 'file:///x', '[]', 0, 0)"
        )
        for seq, (status, created) in enumerate((("queued", 900.0), ("running", 400.0))):
            ledger.db.execute(
                "INSERT INTO jobs (id, batch, key, seq, request_hash, request_json, output_key,"
                " status, step, created_at, updated_at)"
                " VALUES (?, 'b', ?, ?, 'h', '{}', ?, ?, 'probe', ?, ?)",
                (f"j{seq}", f"k{seq}", seq, f"o{seq}", status, created, created),
            )
        stats = ledger.queue_stats(now=1000.0)
        assert (stats["queued"], stats["in_flight"], stats["oldest_age_seconds"]) == (1, 1, 600)
    finally:
        ledger.close()


NUMBER_OPTIONS = [
    (int, {"min": 1}),  # --concurrency
    (float, {"min": 0}),
    (float, {}),  # --grace
    (int, {}),
    (float, {"max": 10.5}),
    (int, {"min": 1, "clamp": True}),  # clamped: always typer's own
]


@settings(max_examples=600, deadline=None)
@given(
    option=st.sampled_from(NUMBER_OPTIONS),
    value=st.one_of(
        st.integers(min_value=-(10**20), max_value=10**20),
        st.floats(),
        st.booleans(),
        st.from_regex(r"[0-9]{1,18}(\.[0-9]{1,17})?", fullmatch=True),
        st.text(alphabet="0123456789+-._eE xinfa", max_size=8),
    ),
)
def test_plain_numbers_coerce_exactly_as_typers_adapter(option, value):
    """Every number option value afc coerces without pydantic (afc_cli/cli_coercion.py) comes
    out as typer's own adapter makes it: the same number of the same type, or the same
    refusal."""
    import typer.core
    from typer._click.exceptions import BadParameter
    from typer._coercion import build_runtime_param, resolve_type_descriptor
    from typer.models import OptionInfo

    from afc_cli.cli_coercion import install

    assert install()
    annotation, bounds = option
    descriptor = resolve_type_descriptor(annotation, OptionInfo(**bounds))
    light, typers = typer.core.build_runtime_param(descriptor), build_runtime_param(descriptor)
    assert type(light).__name__ == "LightParam" and type(typers).__name__ != "LightParam"

    def outcome(param):
        try:
            result = param._coerce_value(value, param=None, ctx=None)
        except BadParameter as exc:
            return ("refused", exc.message)
        return ("value", type(result), result if result == result else "nan")

    assert outcome(light) == outcome(typers)


def test_resume_runs_jobs_without_pydantic_yaml_or_rfc8785(afc):
    """A resume reads no manifest: the run path imports none of the manifest's machinery, and
    its number options (their defaults, or values given) build no pydantic adapter."""
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml", "--no-run", "-q").returncode == 0
    result, heavy = imported_by(afc.cwd, "resume", "--concurrency", "4", "--grace", "2.5", "-q")
    assert result.returncode == 0, result.stderr
    assert heavy == [] or heavy == ["httpx"], heavy
    assert afc.json("status")["counts"] == {"succeeded": 2}


def test_plain_numbers_build_no_adapter_and_others_go_to_typer():
    from typer._coercion import resolve_type_descriptor
    from typer.core import build_runtime_param
    from typer.models import OptionInfo

    from afc_cli.cli_coercion import install

    assert install()
    light = build_runtime_param(resolve_type_descriptor(int, OptionInfo(min=1)))
    assert [light._coerce_value(v, param=None, ctx=None) for v in (8, "500")] == [8, 500]
    grace = build_runtime_param(resolve_type_descriptor(float, OptionInfo()))
    assert grace._coerce_value(30.0, param=None, ctx=None) == 30.0
    assert grace._coerce_value("2.5", param=None, ctx=None) == 2.5
    assert light._built == [] and grace._built == [], "no pydantic adapter was built"
    assert light._coerce_value("+5", param=None, ctx=None) == 5
    assert len(light._built) == 1, "a signed value is typer's to read"
