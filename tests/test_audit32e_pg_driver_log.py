"""Found by an audit of the PostgreSQL ledger: a connection lost while afc wrote many rows at
once (``executemany``: a submit's admission, ``afc ledger copy``) printed psycopg's own log
lines on stderr before afc's one-line message:

    error ignored terminating <psycopg.Pipeline [BAD] at 0x7f...>: consuming input failed:
    server closed the connection unexpectedly
        This probably means the server terminated abnormally
        before or while processing the request.
    afc: cannot write to the ledger postgresql://...: ...

psycopg logs a warning when its pipeline cannot be closed after an error, and with no
logging configured Python prints it on stderr. afc says the failure itself, in one line."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import psycopg
from conftest import jobs, manifest
from test_postgres_e2e import PgAfc

# the real ``afc`` command, whose ledger connection is ended by the server (an
# administrator's pg_terminate_backend) right before its first many-row insert
CUT_BEFORE_EXECUTEMANY = textwrap.dedent(
    """
    import runpy, sys, time
    import psycopg
    from afc_cli.ledger import postgres

    plain = postgres.PgDatabase.executemany

    def cut_first(self, sql, rows):
        if not getattr(postgres, "cut", False):
            postgres.cut = True
            with psycopg.connect(CUT_URL, autocommit=True) as admin:
                admin.execute(
                    "SELECT pg_terminate_backend(%s)", (self.raw.info.backend_pid,)
                )
            time.sleep(0.2)
        return plain(self, sql, rows)

    postgres.PgDatabase.executemany = cut_first
    sys.argv = ["afc", *sys.argv[1:]]
    runpy.run_module("afc_cli", run_name="__main__")
    """
)


def _afc_cut(pg: PgAfc, *args: str) -> subprocess.CompletedProcess:
    script = f"CUT_URL = {pg.url!r}\n" + CUT_BEFORE_EXECUTEMANY
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=pg.cwd,
        env=pg.env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _one_line(stderr: str) -> None:
    assert "error ignored" not in stderr, stderr
    assert "psycopg.Pipeline" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("afc: cannot write to the ledger"), stderr


def test_a_submit_whose_connection_is_cut_in_its_admission_says_so_in_one_line(tmp_path, pg_url):
    pg = PgAfc(tmp_path, pg_url)
    pg.write_manifest(manifest(jobs(3)))
    cut = _afc_cut(pg, "submit", "manifest.yaml", "--no-run")
    assert cut.returncode == 1, cut.stderr
    _one_line(cut.stderr)
    assert pg.rows("SELECT COUNT(*) FROM jobs") == [(0,)], "its admission is one transaction"


def test_a_copy_whose_destination_connection_is_cut_says_so_in_one_line(tmp_path, pg_url):
    pg = PgAfc(tmp_path, pg_url)
    del pg.env["AFC_LEDGER"]
    pg.write_manifest(manifest(jobs(3)))
    assert pg("submit", "manifest.yaml", "--no-run", "--ledger", "afc.db").returncode == 0
    cut = _afc_cut(pg, "ledger", "copy", "afc.db", pg.url)
    assert cut.returncode == 1, cut.stderr
    _one_line(cut.stderr)
    assert "Nothing was copied" in cut.stderr
    with psycopg.connect(pg.url, autocommit=True) as conn:
        assert conn.execute("SELECT COUNT(*) FROM jobs").fetchone() == (0,)
