"""Found by outside audit 20a, of several ``afc worker`` processes on one PostgreSQL ledger
(README "Running on several machines"): what one process does while another's call is in flight."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from conftest import jobs, manifest
from s3fake import Fault
from test_postgres_e2e import PgAfc
from test_postgres_workers import _wait

from afc_cli.owner import machine_fingerprint

# host-a's spool hold (owner.host_lease): host:0:0 and this machine's fingerprint
HOST_A_HOLD = ":".join(filter(None, ["host-a:0:0", machine_fingerprint()]))


@pytest.fixture
def afc(tmp_path, pg_url) -> PgAfc:
    return PgAfc(tmp_path, pg_url)


@pytest.fixture
def pg(afc) -> PgAfc:
    return afc


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


def test_a_paused_upload_is_not_tried_again_at_once_by_another_worker_of_the_host(pg, s3):
    """README "Retries": a worker tries a job whose upload gave up again only after a pause
    that doubles at each failure (30, 60, 120, 240 s), so a storage outage that lets the bucket
    check pass but fails the uploads dead-letters it after about 7.5 minutes. The pause was
    kept by the worker that failed alone: a second worker on the same host (the job is leased
    to the host, whose spool holds the output) took the job at its next claim and tried the
    upload again within a second, spending a second of its five requeues; a few workers on a
    machine dead-lettered it STORE_FAILED in well under a minute."""
    pg.write_manifest(manifest(jobs(1), storage=s3.url))
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    s3.plan.add(Fault("PUT", r"/", "500", -1, retry_after="0"))
    env = {"AFC_HOST_ID": "host-a"}
    first = pg.popen("worker", "--poll", "0.1", "--batch", "b1", env=env)
    try:
        _wait(pg, "SELECT store_failures FROM jobs", 1)
        assert pg.rows("SELECT status, step, lease_owner, store_failures FROM jobs") == [
            ("waiting", "store", HOST_A_HOLD, 1)
        ]
        puts = len(s3.plan.injected)
        # a second worker of the host, with a job of its own (local storage) to run meanwhile
        other = manifest([{"key": "other", "prompt": "another"}], batch="b2")
        pg.write_manifest(other, "other.yaml")
        assert pg("submit", "other.yaml", "--no-run").returncode == 0
        second = pg.popen("worker", "--poll", "0.1", env=env)
        _wait(pg, "SELECT COUNT(*) FROM jobs WHERE batch = 'b2' AND status = 'succeeded'", 1)
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=60) == 0
        said = second.stderr.read()
        assert "worker claimed 1 job in 1 round" in said, said  # b2's, never b1's
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=60) == 0, first.stderr.read()
    assert len(s3.plan.injected) == puts, "the second worker tried the upload again"
    assert pg.rows("SELECT batch, status, store_failures FROM jobs ORDER BY batch") == [
        ("b1", "waiting", 1),
        ("b2", "succeeded", 0),
    ]
    # a person's afc resume still tries it at once, and the spooled render is stored
    s3.plan.clear()
    assert pg("resume", "--batch", "b1", env=env).returncode == 0
    assert pg.rows("SELECT status FROM jobs WHERE batch = 'b1'") == [("succeeded",)]
    assert pg.rows("SELECT COUNT(*) FROM attempts") == [(2,)]


def test_a_claim_whose_output_cannot_be_stored_leaves_the_calls_in_flight_to_finish(pg):
    """A worker's loop takes its next claim while jobs are in their calls (run._fed); a job of
    that claim whose output could not be stored (a file where its folder goes) raised its
    UsageError inside the loop, which ended at once: the paid call in flight was abandoned,
    its attempt left unknown (possibly paid) and the job queued to be paid for again. The
    claim is now given back, the call finishes and is stored, and the worker's next round
    says why it cannot run the other job (exit 2, as before)."""
    log = pg.cwd / "calls.log"
    release = pg.cwd / "release"
    data = manifest(jobs(2))
    data["jobs"][1]["output"] = "blocker/{key}.{ext}"
    pg.write_manifest(data)
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    (pg.cwd / "afc-outputs").mkdir()
    (pg.cwd / "afc-outputs" / "blocker").write_text("in the way")
    worker = pg.popen(
        "worker", "--poll", "0.1", "--claim", "1", "--concurrency", "2",
        env={"AFC_LOCAL_CALL_LOG": str(log), "AFC_LOCAL_RELEASE": str(release)},
    )  # fmt: skip
    # shot-002 claimed beside shot-001's call and given back (its lease freed), shot-001's
    # attempt row written: the call is still in flight, not abandoned (the loop that ended
    # marked it unknown in the transaction that freed shot-002's lease)
    seen = (
        "SELECT (SELECT COUNT(*) FROM jobs WHERE key = 'shot-002' AND lease_owner IS NULL"
        " AND updated_at > created_at) * (SELECT COUNT(*) FROM attempts)"
    )
    deadline = time.time() + 30
    while worker.poll() is None and time.time() < deadline and not pg.rows(seen)[0][0]:
        time.sleep(0.02)
    assert pg.rows("SELECT status FROM attempts") == [("started",)], worker.stderr.read()
    release.touch()  # shot-001's call answers
    assert worker.wait(timeout=60) == 2
    assert "blocker is a file, not a folder" in worker.stderr.read()
    assert pg.rows(
        "SELECT j.key, j.status, j.lease_owner, a.status FROM jobs j"
        " LEFT JOIN attempts a ON a.job_id = j.id ORDER BY j.key"
    ) == [("shot-001", "succeeded", None, "succeeded"), ("shot-002", "queued", None, None)]
    assert len(log.read_text().splitlines()) == 1
    assert (pg.cwd / "afc-outputs" / "b1" / "shot-001.png").exists()


def test_a_retried_store_failed_job_is_stored_by_the_host_whose_spool_holds_it(pg, s3):
    """A job dead-lettered STORE_FAILED says 'afc retry KEY (it stores the spooled output; no
    render)', but its render is in the spool of the host that made it alone, and the retry
    queued it at the probe for any worker: one on another host found nothing stored and no
    spool file, and paid for the render again. The retry now leaves it at its store step,
    leased to that host: another host's run leaves it alone, that host's worker stores it."""
    log = pg.cwd / "calls.log"
    here = {"AFC_HOST_ID": "host-a", "AFC_LOCAL_CALL_LOG": str(log)}
    there = {**here, "AFC_HOST_ID": "host-b", "AFC_SPOOL_DIR": str(pg.cwd / "spool-b")}
    pg.write_manifest(manifest(jobs(1), storage=s3.url))
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    s3.plan.add(Fault("PUT", r"/", "500", -1, retry_after="0"))
    for _ in range(5):  # a person's resume tries the upload at once: five runs
        assert pg("resume", env=here).returncode == 1
    assert pg.rows("SELECT status, step, error_code FROM jobs") == [
        ("dead", "store", "STORE_FAILED")
    ]
    s3.plan.clear()
    assert pg("retry", "shot-001", env=here).returncode == 0
    pg("resume", env=there)  # another host: its spool has no such file
    assert len(log.read_text().splitlines()) == 1, "the render was paid for again"
    assert pg.rows("SELECT status, step, lease_owner FROM jobs") == [
        ("queued", "store", HOST_A_HOLD)
    ]
    done = pg("worker", "--until-idle", "--poll", "0.1", env=here)
    assert done.returncode == 0, done.stderr
    assert pg.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert len(log.read_text().splitlines()) == 1, "the render was paid for again"
    assert pg.rows("SELECT status FROM attempts") == [("succeeded",)]


def test_a_paused_probe_is_not_tried_again_at_once_by_a_worker_of_another_host(pg, s3):
    """The pause after storage gave up at a job's probe (nothing rendered yet: the job's key
    could not be read) was kept by the failing worker alone, the job left free: a worker of
    another host (or of this one) took it at its next claim and read the failing storage again
    within a second, spending its MAX_STORE_REQUEUES in seconds of an outage that lets the
    bucket check pass, and it was dead-lettered STORE_FAILED. Now the job is leased to the
    failing worker's host for the pause, as an upload's is for a lease."""
    pg.write_manifest(manifest(jobs(1), storage=s3.url))
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    s3.plan.add(Fault("HEAD", r"/films/", "500", -1, retry_after="0"))
    first = pg.popen("worker", "--poll", "0.1", "--batch", "b1", env={"AFC_HOST_ID": "host-a"})
    try:
        _wait(pg, "SELECT store_failures FROM jobs", 1)
        assert pg.rows("SELECT status, step, lease_owner, store_failures FROM jobs") == [
            ("waiting", "probe", HOST_A_HOLD, 1)
        ]
        heads = len(s3.plan.injected)
        other = manifest([{"key": "other", "prompt": "another"}], batch="b2")
        pg.write_manifest(other, "other.yaml")
        assert pg("submit", "other.yaml", "--no-run").returncode == 0
        second = pg.popen("worker", "--poll", "0.1", env={"AFC_HOST_ID": "host-b"})
        _wait(pg, "SELECT COUNT(*) FROM jobs WHERE batch = 'b2' AND status = 'succeeded'", 1)
        time.sleep(0.5)  # a few of its polls
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=60) == 0
        said = second.stderr.read()
        assert "worker claimed 1 job in 1 round" in said, said  # b2's, never b1's
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=60) == 0, first.stderr.read()
    assert len(s3.plan.injected) == heads, "the other host's worker read the storage again"
    assert pg.rows("SELECT batch, status, store_failures FROM jobs ORDER BY batch") == [
        ("b1", "waiting", 1),
        ("b2", "succeeded", 0),
    ]
    # a person's afc resume on that host still tries it at once, and nothing was paid
    s3.plan.clear()
    assert pg("resume", "--batch", "b1", env={"AFC_HOST_ID": "host-a"}).returncode == 0
    assert pg.rows("SELECT status FROM jobs WHERE batch = 'b1'") == [("succeeded",)]
