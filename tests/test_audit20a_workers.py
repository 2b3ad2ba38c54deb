"""Found by outside audit 20a, of several ``afc worker`` processes on one PostgreSQL ledger
(SPEC §12 "Beyond one machine"): what one process does while another's call is in flight."""

from __future__ import annotations

import threading
import time

import pytest
from conftest import jobs, manifest
from test_postgres_e2e import PgAfc
from test_postgres_workers import _wait


@pytest.fixture
def pg(tmp_path, pg_url) -> PgAfc:
    return PgAfc(tmp_path, pg_url)


def _lines(proc) -> list[str]:
    """The lines of ``proc``'s stderr as they come (a thread reads them)."""
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()
    return lines


def test_a_cancelled_jobs_call_in_flight_still_counts_toward_a_shared_limit(pg):
    """``limits: {local: {concurrency: 1}}``: host-a's call for a job that ``afc cancel`` ends
    meanwhile goes on (a synchronous provider's cannot be stopped) and is paid; host-b's worker
    waits for it. The cancel freed the job's lease, and the limit counted only the calls of
    jobs whose lease was live, so host-b started a second call at once."""
    log = pg.cwd / "calls.log"
    release = pg.cwd / "release"
    limits = {"local": {"concurrency": 1}}
    pg.write_manifest(manifest(jobs(1), limits=limits))
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    other = manifest([{"key": "other", "prompt": "another"}], batch="b2", limits=limits)
    pg.write_manifest(other, "other.yaml")
    assert pg("submit", "other.yaml", "--no-run").returncode == 0
    env = {"AFC_LOCAL_CALL_LOG": str(log), "AFC_LEASE_S": "30"}

    def worker(host: str, batch: str, *extra: str):
        return pg.popen(
            "worker", "--until-idle", "--poll", "0.1", "--batch", batch, *extra,
            env={**env, "AFC_HOST_ID": host, "AFC_LOCAL_RELEASE": str(release)},
        )  # fmt: skip

    first = worker("host-a", "b1")
    _wait(pg, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 1)
    assert pg("cancel", "shot-001", "--batch", "b1").returncode == 0
    (release.parent / "release.other").touch()  # host-b's call, once made, answers at once
    second = worker("host-b", "b2", "-v")
    said = _lines(second)
    deadline = time.time() + 30
    while time.time() < deadline:
        if len(log.read_text().splitlines()) > 1 or any("across this ledger" in s for s in said):
            break
        time.sleep(0.02)
    assert len(log.read_text().splitlines()) == 1, "two calls to the provider at once"
    assert any("1 call in flight across this ledger (limit 1)" in s for s in said), said

    release.touch()  # host-a's call answers (and is recorded); host-b's follows
    assert first.wait(timeout=60) == 1  # --until-idle: its job ended cancelled
    assert second.wait(timeout=60) == 0, "".join(said)
    spans = pg.rows(
        "SELECT a.started_at, a.ended_at, j.batch, a.status FROM attempts a"
        " JOIN jobs j ON j.id = a.job_id ORDER BY a.started_at"
    )
    assert [(batch, status) for _, _, batch, status in spans] == [
        ("b1", "succeeded"),
        ("b2", "succeeded"),
    ]
    assert spans[1][0] >= spans[0][1], "host-b's call started before host-a's ended"
    assert pg.rows("SELECT batch, status FROM jobs ORDER BY batch") == [
        ("b1", "cancelled"),
        ("b2", "succeeded"),
    ]
