"""``afc worker`` on one PostgreSQL ledger: several workers, as if on several hosts
(``AFC_HOST_ID`` gives each its own host in its owner id, so none can tell whether another's
process is alive: only lease expiry frees a job, as between real machines)."""

from __future__ import annotations

import collections
import signal
import time

import pytest
from conftest import jobs, manifest
from test_postgres_e2e import PgAfc


@pytest.fixture
def pg(tmp_path, pg_url) -> PgAfc:
    return PgAfc(tmp_path, pg_url)


def _wait(pg: PgAfc, sql: str, threshold: int, timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pg.rows(sql)[0][0] >= threshold:
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {sql} >= {threshold}")


def _worker(pg: PgAfc, host: str, log, *extra: str, env: dict[str, str] | None = None):
    return pg.popen(
        "worker",
        "--until-idle",
        "--poll",
        "0.2",
        "--concurrency",
        "2",
        "--claim",
        "3",
        *extra,
        env={
            "AFC_HOST_ID": host,
            "AFC_LEASE_S": "3",
            "AFC_LOCAL_CALL_LOG": str(log),
            **(env or {}),
        },
    )


def test_three_hosts_one_killed_every_job_ends_once(pg):
    n = 24
    log = pg.cwd / "calls.log"
    pg.write_manifest(manifest(jobs(n, latency_s=0.3)))
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    # every render is held until each host has one in flight (a host that boots late on a
    # busy machine still gets work), then host-a dies with its calls in flight
    release = pg.cwd / "release"
    workers = {
        host: _worker(pg, host, log, env={"AFC_LOCAL_RELEASE": str(release)})
        for host in ("host-a", "host-b", "host-c")
    }
    for host in workers:
        _wait(pg, f"SELECT COUNT(*) FROM attempts WHERE owner LIKE '{host}:%'", 1)
    workers["host-a"].send_signal(signal.SIGKILL)
    assert workers["host-a"].wait(timeout=30) == -signal.SIGKILL
    release.touch()
    for host in ("host-b", "host-c"):
        assert workers[host].wait(timeout=90) == 0, workers[host].stderr.read()

    assert pg.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("succeeded", n)]
    per_job = pg.rows(
        "SELECT job_id, SUM(CASE WHEN status = 'succeeded' THEN 1 ELSE 0 END) FROM attempts"
        " GROUP BY job_id"
    )
    assert len(per_job) == n and all(ok == 1 for _, ok in per_job), "every job ends once"
    # the only calls paid twice are the ones in flight on the dead host: each left an
    # attempt of host-a's, marked unknown when another host took the job over
    unknown = pg.rows("SELECT job_id, owner FROM attempts WHERE status = 'unknown'")
    assert unknown and all(owner.startswith("host-a:") for _, owner in unknown)
    calls = collections.Counter(line.split()[0] for line in log.read_text().splitlines())
    assert set(calls) == {job_id for job_id, _ in per_job}
    twice = {job_id for job_id, count in calls.items() if count > 1}
    assert twice == {job_id for job_id, _ in unknown}
    assert all(count <= 2 for count in calls.values())
    takeovers = pg.rows("SELECT COUNT(*) FROM events WHERE kind = 'takeover'")[0][0]
    assert takeovers >= len(unknown)
    # and all three hosts did work
    owners = {row[0].split(":")[0] for row in pg.rows("SELECT DISTINCT owner FROM attempts")}
    assert owners == {"host-a", "host-b", "host-c"}


def test_sigterm_drains_a_worker_and_another_finishes_its_jobs(pg):
    log = pg.cwd / "calls.log"
    pg.write_manifest(manifest(jobs(6, latency_s=0.5)))
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    first = pg.popen(
        "worker", "--concurrency", "3", "--poll", "0.2", env={"AFC_LOCAL_CALL_LOG": str(log)}
    )
    _wait(pg, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 3)
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=30) == 0, first.stderr.read()
    # what it had in flight finished and was recorded; nothing it held stays leased
    assert pg.rows("SELECT COUNT(*) FROM attempts WHERE status <> 'succeeded'") == [(0,)]
    assert pg.rows("SELECT COUNT(*) FROM jobs WHERE lease_owner IS NOT NULL") == [(0,)]
    done = pg.json("worker", "--until-idle", "--poll", "0.2", env={"AFC_LOCAL_CALL_LOG": str(log)})
    assert done["exit_code"] == 0
    assert pg.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("succeeded", 6)]
    calls = log.read_text().splitlines()
    assert len(calls) == 6, "no job was rendered twice"


def test_an_idle_worker_exits_at_once_with_until_idle_and_a_bad_lease_is_refused(pg):
    pg.write_manifest(manifest(jobs(1)))
    assert pg("submit", "manifest.yaml").returncode == 0
    idle = pg.json("worker", "--until-idle")
    assert (idle["claimed"], idle["exit_code"]) == (0, 0)
    refused = pg("worker", "--until-idle", env={"AFC_LEASE_S": "soon"})
    assert refused.returncode == 2 and "AFC_LEASE_S" in refused.stderr


def test_one_budget_holds_across_workers_on_two_hosts(pg):
    pg.write_manifest(manifest(jobs(20, latency_s=0.2)))  # 0.05 USD a render
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    workers = [
        pg.popen(
            "worker",
            "--until-idle",
            "--poll",
            "0.2",
            "--concurrency",
            "3",
            "--max-spend",
            "0.30",
            env={"AFC_HOST_ID": host},
        )
        for host in ("host-a", "host-b")
    ]
    codes = [w.wait(timeout=60) for w in workers]
    assert codes == [4, 4], [w.stderr.read() for w in workers]
    # six estimates of 0.05 fit under 0.30, whichever host started them: never a seventh
    assert pg.rows("SELECT COUNT(*) FROM attempts") == [(6,)]
    assert pg.rows("SELECT CAST(SUM(cost_micros) AS BIGINT) FROM attempts") == [(300_000,)]
    hosts = {row[0].split(":")[0] for row in pg.rows("SELECT owner FROM attempts")}
    assert hosts <= {"host-a", "host-b"}


def test_a_provider_limit_holds_across_workers_on_two_hosts(pg):
    """``limits: {local: {concurrency: 1}}`` with two workers, each running 2 jobs at once:
    never more than one call to the provider in flight across both hosts."""
    log = pg.cwd / "calls.log"
    pg.write_manifest(manifest(jobs(6, latency_s=0.3), limits={"local": {"concurrency": 1}}))
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    workers = [_worker(pg, host, log) for host in ("host-a", "host-b")]
    for worker in workers:
        assert worker.wait(timeout=90) == 0, worker.stderr.read()
    assert pg.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("succeeded", 6)]
    spans = sorted(
        pg.rows("SELECT started_at, ended_at, owner FROM attempts WHERE status = 'succeeded'")
    )
    assert len(spans) == 6
    assert {owner.split(":")[0] for _, _, owner in spans} == {"host-a", "host-b"}
    for (_, ended, _), (started, _, _) in zip(spans, spans[1:], strict=False):
        assert started >= ended, "two calls to the provider were in flight at once"
