"""Outside audit 30b (the maintainer's known item 'a PostgreSQL connection lost mid-listing
says "cannot write to the ledger" for a read'): 'afc status --all' (and every command that
only reads: 'afc outputs', the reports) said it could not write to the ledger when its
connection was lost while it streamed its rows. It says it cannot read it now, with the same
exit code (1) and the same advice."""

from __future__ import annotations

import subprocess

import pytest
from conftest import manifest
from test_postgres_e2e import PgAfc

N = 4000  # four of the listing's chunks (core.STREAM_ROWS): the pipe fills inside the first


@pytest.fixture
def pg(tmp_path, pg_url) -> PgAfc:
    return PgAfc(tmp_path, pg_url)


def _terminate_others(pg: PgAfc) -> int:
    return len(
        pg.rows(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    )


@pytest.mark.parametrize(
    "command",
    [("status", "--all"), ("status", "--json")],
    ids=["status-all", "status-json"],
)
def test_a_listing_whose_connection_is_lost_says_it_cannot_read(pg, command):
    top = manifest([], jobs_from="jobs.jsonl")
    del top["jobs"]
    pg.write_manifest(top)
    (pg.cwd / "jobs.jsonl").write_text(
        "".join(f'{{"key": "shot-{i:05d}", "prompt": "a lighthouse {i}"}}\n' for i in range(N))
    )
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    proc = subprocess.Popen(
        pg.command(*command),
        cwd=pg.cwd,
        env=pg.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout.read(4096)  # the listing has begun, and waits on a full pipe
        assert _terminate_others(pg) >= 1
        proc.stdout.read()
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == 1, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "cannot read the ledger postgresql://" in err, err
    assert "cannot write" not in err, err
    assert "check the database server and the connection to it" in err, err
    assert "this command changed nothing" in err, err
