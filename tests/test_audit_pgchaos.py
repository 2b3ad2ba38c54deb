"""Found by bench/chaos.py --postgres: three ``afc worker`` hosts on one PostgreSQL ledger and
one bucket, killed, stalled past their lease and drained at random, then reconciled."""

from __future__ import annotations

import collections
import time

import pytest
from conftest import jobs, manifest
from s3fake import Fault
from test_postgres_e2e import PgAfc


@pytest.fixture
def afc(tmp_path, pg_url) -> PgAfc:
    return PgAfc(tmp_path, pg_url)


def test_a_worker_outlives_a_5xx_on_its_storage_check_and_holds_no_lease(afc, s3):
    """A worker checks the bucket (HEAD) before each new run loop; one 500 there, after it had
    claimed a round of jobs, ended the worker with exit 1 ('cannot use bucket'), its claimed
    jobs left leased to a dead process: other hosts could not run them before the lease ran
    out (AFC_LEASE_S, default 5 minutes). A worker runs until SIGTERM: a retryable storage
    error gives the claim back and it tries again at its next poll. (The check itself tries
    three times, as any storage call: three 500s in a row fail it.)"""
    afc.write_manifest(manifest(jobs(4)))
    assert afc("submit", "manifest.yaml", "--storage", s3.url, "--no-run").returncode == 0
    s3.plan.add(Fault("HEAD", r".", "500", 3, retry_after="0"))
    done = afc("worker", "--until-idle", "--poll", "0.2", env={"AFC_HOST_ID": "host-a"})
    assert done.returncode == 0, done.stderr
    assert "cannot use bucket" in done.stderr  # said, not fatal
    assert afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("succeeded", 4)]
    assert afc.rows("SELECT COUNT(*) FROM jobs WHERE lease_owner IS NOT NULL") == [(0,)]
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(4,)]


def test_a_worker_refused_by_its_storage_gives_its_claim_back(afc, s3):
    """A storage error that no retry cures (the bucket is gone) still ends the worker (exit
    2), but the jobs it had claimed are released, not left leased to a dead process."""
    afc.write_manifest(manifest(jobs(3)))
    assert afc("submit", "manifest.yaml", "--storage", s3.url, "--no-run").returncode == 0
    s3.client.delete_bucket(Bucket=s3.bucket)
    refused = afc("worker", "--until-idle", "--poll", "0.2", env={"AFC_HOST_ID": "host-a"})
    assert refused.returncode == 2, refused.stderr
    assert afc.rows("SELECT COUNT(*) FROM jobs WHERE lease_owner IS NOT NULL") == [(0,)]
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(0,)]


def _wait_for(afc, sql: str, timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if afc.rows(sql)[0][0]:
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {sql}")


def test_a_host_back_after_a_crash_adopts_its_spooled_render_before_taking_new_jobs(afc):
    """A worker killed between spooling a paid render and storing it leaves the bytes in its
    host's spool. The README promises the host's next worker adopts them if it comes back
    before the lease runs out; but a claim took free jobs first and the dead predecessor's
    only with room left, so with work queued the new worker rendered other jobs while the
    lease ran out, and another host, finding the job's spool file nowhere, rendered it and
    paid again."""
    calls, release = afc.cwd / "calls.log", afc.cwd / "release"
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    host_a = {"AFC_HOST_ID": "host-a", "AFC_SPOOL_DIR": str(afc.cwd / "spool-a")}
    held = {"AFC_LOCAL_CALL_LOG": str(calls), "AFC_LOCAL_RELEASE": str(release)}
    one = ["worker", "--until-idle", "--poll", "0.2", "--concurrency", "1", "--claim", "1"]
    crashed = afc(
        *one,
        env={
            **host_a,
            "AFC_LEASE_S": "3",
            "AFC_CRASH_POINT": "after_spool",
            "AFC_LOCAL_CALL_LOG": str(calls),
        },
    )
    assert crashed.returncode == -9
    assert len(list((afc.cwd / "spool-a").glob("*.spool"))) == 1  # shot-001, paid, not stored
    afc.write_manifest(manifest(jobs(5)))  # more work queued meanwhile
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    # host-a's worker is back at once; its renders are held until the end
    back = afc.popen(*one, env={**host_a, **held})
    _wait_for(afc, f"SELECT COUNT(*) FROM jobs WHERE lease_owner LIKE 'host-a:{back.pid}:%'")
    time.sleep(3.5)  # past the dead worker's lease: another host may take over what it left
    other = afc.popen(
        "worker",
        "--until-idle",
        "--poll",
        "0.2",
        "--concurrency",
        "8",
        env={"AFC_HOST_ID": "host-b", "AFC_SPOOL_DIR": str(afc.cwd / "spool-b"), **held},
    )
    _wait_for(afc, "SELECT COUNT(*) FROM jobs WHERE lease_owner LIKE 'host-b:%'")
    time.sleep(1)
    release.touch()
    assert back.wait(timeout=60) == 0, back.stderr.read()
    assert other.wait(timeout=60) == 0, other.stderr.read()
    assert afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("succeeded", 5)]
    rendered = collections.Counter(line.split()[0] for line in calls.read_text().splitlines())
    assert set(rendered.values()) == {1}, "a render was paid for twice"
    assert list((afc.cwd / "spool-a").glob("*.spool")) == []


def test_a_stalled_hosts_late_answer_does_not_end_the_attempt_another_host_polls(afc, pg_url):
    """A host stalled (SIGSTOP) past its lease while it fetched a Replicate output through a
    CDN outage (``HttpProvider.outlast``). Another host took the job over and, the request id
    being known, reopened the attempt to poll it (no second payment). The stalled host woke,
    saw the job taken over and stopped fetching: its report of the attempt ("failed: not
    fetched further") landed on the reopened row, still ``started``, and ended it; the
    poller's success came second and changed nothing (the first outcome stands), so the job
    succeeded with no succeeded attempt. A report from a process that no longer owns the
    attempt changes neither its outcome nor a cost already known; it may give a cost that is
    not (the same request's)."""
    from afc_cli.costs import RateCards
    from afc_cli.ledger import Ledger
    from afc_cli.manifest import load_manifest

    m = load_manifest(afc.write_manifest(manifest(jobs(2))))
    poller = Ledger(pg_url)
    poller.admit(m, "file:///tmp/x", RateCards())
    stalled = Ledger(pg_url)
    stalled.owner = "host-b:4242:1"
    model = "black-forest-labs/flux-1.1-pro"
    report = {"chain_index": 0, "provider": "replicate", "model": model}
    gave_up = {
        **report,
        "status": "failed",
        "error_class": "server",
        "error_message": "replicate: output download answered HTTP 503 (not fetched further:"
        " the job was taken over by another afc process)",
    }
    paid = {"cost_micros": 40_000, "cost_source": "derived"}
    for job, late_first in zip([poller.job(j.job_id) for j in m.jobs], (True, False), strict=True):
        job = stalled.claim(job["id"], 0.01)  # its lease runs out at once: a stall
        assert stalled.start_attempt(job, 0, "replicate", model, None, durable=False) == 1
        stalled.record_request_id(job, 1, "replicate", "pred-1")
        time.sleep(0.05)
        job = poller.claim(job["id"], 60)  # the takeover: the attempt is unknown, then polled
        (attempt,) = poller.attempts(job["id"])
        assert attempt["status"] == "unknown" and poller.reopen_attempt(job, attempt)
        if late_first:
            stalled.end_attempt(job, 1, **gave_up, **paid)
            poller.end_attempt(job, 1, **report, status="succeeded", **paid)
        else:  # the poller's success first, then the stalled host's report, its cost unknown
            poller.end_attempt(job, 1, **report, status="succeeded", **paid)
            stalled.end_attempt(job, 1, **gave_up)
        (attempt,) = poller.attempts(job["id"])
        assert (attempt["status"], attempt["owner"], attempt["error_message"]) == (
            "succeeded",
            poller.owner,
            None,
        ), late_first
        assert (attempt["cost_micros"], attempt["cost_source"]) == (40_000, "derived")
    stalled.close()
    poller.close()
