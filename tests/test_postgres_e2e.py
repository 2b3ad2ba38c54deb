"""The real ``afc`` command on a PostgreSQL ledger: the promises, the crash tests and the
concurrency tests of the SQLite ledger (test_crash.py, test_concurrency.py), here on a real
server the session started (tests/pg_server.py). Each test has its own database."""

from __future__ import annotations

import signal
import time

import pytest
from conftest import Afc, jobs, manifest


class PgAfc(Afc):
    """``afc`` with ``AFC_LEDGER`` naming a PostgreSQL database; ``rows`` reads it."""

    def __init__(self, cwd, url: str):
        super().__init__(cwd)
        self.url = url
        self.env["AFC_LEDGER"] = url

    def rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        import psycopg

        from afc_cli.ledger.postgres import translate

        with psycopg.connect(self.url, autocommit=True) as conn:
            return [tuple(r) for r in conn.execute(translate(sql), params or None).fetchall()]

    def spool(self):
        return self.cwd / "afc-spool"


@pytest.fixture
def pg(tmp_path, pg_url) -> PgAfc:
    return PgAfc(tmp_path, pg_url)


def _count(afc: PgAfc, sql: str) -> int:
    try:
        return afc.rows(sql)[0][0]
    except Exception:  # the child may still be creating the schema
        return 0


def _kill_when(afc: PgAfc, args: list[str], sql: str, threshold: int, env: dict) -> int:
    proc = afc.popen(*args, env=env)
    deadline = time.time() + 30
    while time.time() < deadline and proc.poll() is None:
        if _count(afc, sql) >= threshold:
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    return proc.returncode


def _all_done_once(afc: PgAfc, n: int) -> None:
    assert afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("succeeded", n)]
    per_job = afc.rows(
        "SELECT j.key, SUM(CASE WHEN a.status = 'succeeded' THEN 1 ELSE 0 END) FROM jobs j"
        " LEFT JOIN attempts a ON a.job_id = j.id GROUP BY j.key"
    )
    assert all(succeeded == 1 for _, succeeded in per_job), per_job
    others = afc.rows("SELECT DISTINCT status FROM attempts WHERE status <> 'succeeded'")
    assert set(others) <= {("unknown",)}
    assert afc.rows("SELECT COUNT(*) FROM attempts WHERE status = 'started'") == [(0,)]
    outputs = sorted(p.name for p in (afc.outputs() / "b1").iterdir() if p.suffix == ".png")
    assert outputs == [f"shot-{i:03d}.png" for i in range(1, n + 1)]
    assert list(afc.spool().glob("*.spool")) == []


def test_submit_replay_and_reports_on_postgresql(pg):
    pg.write_manifest(manifest(jobs(5)))
    first = pg.json("submit", "manifest.yaml")
    assert first["exit_code"] == 0
    assert pg.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("succeeded", 5)]
    replay = pg.json("submit", "manifest.yaml")
    assert replay["exit_code"] == 0
    assert pg.rows("SELECT COUNT(*) FROM attempts") == [(5,)], "a replay renders nothing"
    report = pg.json("costs", "report", "--by", "model")
    assert report["total"]["priced"] == "0.250000"
    assert report["total"]["avoided_renders"] == 5
    status = pg.json("status", "--all")
    assert {j["status"] for j in status["jobs"]} == {"succeeded"}
    assert pg.json("queue", "stats")["queued"] == 0
    plan = pg.json("plan", "manifest.yaml")
    assert (plan["replayed"], plan["to_render"], plan["new"]) == (5, 0, 0)


STARTED = "SELECT COUNT(*) FROM attempts WHERE status = 'started' AND id > {after}"


@pytest.mark.parametrize(
    "kills",
    [
        # every call held (AFC_LOCAL_RELEASE): killed with two calls in flight
        [((), STARTED, 2)],
        # shots 1-3 released, the rest held: killed once those three are spooled, so shots
        # 4-10 are provably unrendered; then a resume killed with two new calls in flight
        [
            (
                ("shot-001", "shot-002", "shot-003"),
                "SELECT COUNT(*) FROM steps WHERE step = 'spool'",
                3,
            ),
            ((), STARTED, 2),
        ],
    ],
    ids=["during", "spooled-then-resume"],
)
def test_sigkill_then_resume_finishes_every_job_once(pg, kills):
    pg.write_manifest(manifest(jobs(10)))
    release = pg.cwd / "release"
    for i, (released, sql, threshold) in enumerate(kills):
        for key in released:
            (pg.cwd / f"release.{key}").touch()
        after = _count(pg, "SELECT COALESCE(MAX(id), 0) FROM attempts") if i else 0
        args = ["submit", "manifest.yaml"] if i == 0 else ["resume"]
        env = {"AFC_LOCAL_RELEASE": str(release)}
        code = _kill_when(
            pg, [*args, "--concurrency", "4"], sql.format(after=after), threshold, env
        )
        assert code == -signal.SIGKILL
        if i == 0 and released:
            rendered = pg.rows("SELECT COUNT(*) FROM steps WHERE step = 'spool'")[0][0]
            assert rendered == len(released), "the held shots were not rendered"
    final = pg("resume", "--concurrency", "4")
    assert final.returncode == 0, final.stderr
    _all_done_once(pg, 10)
    unknown = pg.rows("SELECT COUNT(*) FROM attempts WHERE status = 'unknown'")[0][0]
    adopted = pg.rows("SELECT COUNT(*) FROM attempts WHERE error_message LIKE 'adopted%'")[0][0]
    marked = pg.rows("SELECT COUNT(*) FROM events WHERE kind = 'attempt_unknown'")[0][0]
    assert unknown + adopted == marked >= 2  # at least the calls in flight at the last kill


def test_crash_after_the_attempt_row_is_unknown_and_retried(pg):
    pg.write_manifest(manifest(jobs(1)))
    died = pg("submit", "manifest.yaml", env={"AFC_CRASH_POINT": "after_attempt_row"})
    assert died.returncode == -signal.SIGKILL
    assert pg("resume").returncode == 0
    rows = pg.rows("SELECT number, status, cost_micros FROM attempts ORDER BY number")
    assert rows == [(1, "unknown", None), (2, "succeeded", 50000)]


def test_crash_after_spool_adopts_it_without_rendering_again(pg):
    pg.write_manifest(manifest(jobs(1)))
    died = pg("submit", "manifest.yaml", env={"AFC_CRASH_POINT": "after_spool"})
    assert died.returncode == -signal.SIGKILL
    assert list(pg.spool().glob("*.spool"))
    assert pg("resume").returncode == 0
    # at the cost its answer made known, committed before the spool file was written
    assert pg.rows("SELECT number, status, cost_micros FROM attempts") == [(1, "succeeded", 50000)]
    _all_done_once(pg, 1)


def test_two_resumes_at_once_render_every_job_exactly_once(pg):
    log = pg.cwd / "calls.log"
    pg.write_manifest(manifest(jobs(30, latency_s=0.1)))
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    env = {"AFC_LOCAL_CALL_LOG": str(log)}
    first = pg.popen("resume", "--concurrency", "4", env=env)
    second = pg.popen("resume", "--concurrency", "4", env=env)
    assert first.wait(timeout=60) in (0, 1)
    assert second.wait(timeout=60) in (0, 1)
    assert pg.json("resume")["exit_code"] == 0
    calls = log.read_text().split("\n")[:-1]
    assert len(calls) == 30 and len({c.split()[0] for c in calls}) == 30
    assert pg.rows("SELECT COUNT(*) FROM attempts") == [(30,)]


def test_a_job_whose_provider_is_still_rendering_is_waiting_on_postgresql(pg, fake):
    """As on SQLite (tests/test_providers.py): ``waiting`` while a run polls a Replicate
    request, here with the run's writes grouped in one psycopg pipeline; ``running`` again
    once the provider answered, and one prediction paid."""

    pg.env.update(fake.env())
    data = manifest([{"key": "j", "prompt": "hold"}])
    data["defaults"]["chain"] = [
        {"provider": "replicate", "model": "black-forest-labs/flux-1.1-pro"}
    ]
    data["rates"] = [
        {"provider": "replicate", "model": "black-forest-labs/flux-1.1-pro", "per_image": "0.04"}
    ]
    pg.write_manifest(data)
    proc = pg.popen("submit", "manifest.yaml")
    deadline = time.time() + 30
    while (
        time.time() < deadline
        and _count(pg, "SELECT COUNT(*) FROM attempts WHERE provider_request_id IS NOT NULL") < 1
    ):
        time.sleep(0.02)
    [(request_id,)] = pg.rows("SELECT provider_request_id FROM attempts")
    [(status, reason)] = pg.rows("SELECT status, waiting_reason FROM jobs")
    assert (status, reason) == (
        "waiting",
        f"provider still rendering: replicate request {request_id}",
    )
    fake.released.set()
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    assert pg.rows("SELECT status, waiting_reason FROM jobs") == [("succeeded", None)]
    assert fake.counts["replicate_submit"] == 1
