"""Outside audit 25e: a worker whose connection to a PostgreSQL ledger is lost (the server
restarted, its session terminated) at the moment its run loop claims more jobs, while other
jobs' paid calls are in flight."""

from __future__ import annotations

import collections
import os

import pytest
from conftest import manifest
from test_postgres_e2e import PgAfc

# The worker's second refill claim (worker.Refill) is the first statement after its session
# is terminated: what a server restart does to a worker between two of its jobs' writes.
SITECUSTOMIZE = """
import os, pathlib

import afc_cli.worker as worker

_claim = worker.Refill.__call__
_calls = []


def _cut_then_claim(self, running):
    _calls.append(1)
    if len(_calls) == 2:
        import psycopg

        with psycopg.connect(os.environ["AFC_LEDGER"], autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(%s)", (self.ledger.db.raw.info.backend_pid,)
            )
        pathlib.Path(os.environ["AFC_LOCAL_RELEASE"]).touch()  # the held call answers
    return _claim(self, running)


worker.Refill.__call__ = _cut_then_claim
"""


@pytest.fixture
def pg(tmp_path, pg_url) -> PgAfc:
    return PgAfc(tmp_path, pg_url)


def test_a_lost_connection_met_by_a_workers_refill_keeps_the_calls_in_flight(pg):
    """A server restart under two workers: one of them (its stderr without 'stopping') met
    the lost connection in the claim its run loop makes for more jobs, not in a job's write.
    That claim's error ended the loop at once, cancelling the jobs whose paid calls were in
    flight; the next worker found their attempts of unknown outcome and paid for each again.
    Now the run stops as at a job's failed write: the calls in flight finish within the
    grace, their renders kept and stored, and the next worker pays for nothing twice."""
    keys = [f"shot-{i:03d}" for i in range(1, 7)]
    pg.write_manifest(manifest([{"key": key, "prompt": key} for key in keys]))
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    log, release = pg.cwd / "calls.log", pg.cwd / "release"
    for key in ("shot-002", "shot-003"):  # these answer at once; shot-001's call is held
        (pg.cwd / f"release.{key}").touch()
    site = pg.cwd / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {
        "AFC_LOCAL_CALL_LOG": str(log),
        "AFC_LOCAL_RELEASE": str(release),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
    }
    cut = pg("worker", "--concurrency", "2", "--claim", "2", "--poll", "0.1", env=env)
    assert cut.returncode == 1, cut.stderr
    assert "Traceback" not in cut.stderr and "a bug in afc" not in cut.stderr, cut.stderr
    assert "cannot write to the ledger" in cut.stderr, cut.stderr
    assert "kept in the spool" in cut.stderr, cut.stderr

    done = pg.json("worker", "--until-idle", "--poll", "0.1", env={"AFC_LOCAL_CALL_LOG": str(log)})
    assert done["exit_code"] == 0
    assert pg.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("succeeded", 6)]
    calls = collections.Counter(line.split()[0] for line in log.read_text().splitlines())
    assert sorted(calls.values()) == [1] * 6, "a call in flight was paid for again"
    assert pg.rows("SELECT status, cost_micros, COUNT(*) FROM attempts GROUP BY 1, 2") == [
        ("succeeded", 50_000, 6)
    ]
