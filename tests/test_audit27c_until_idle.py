"""``afc worker --until-idle`` waiting on jobs another process holds says so (outside audit
27c): it polled in silence, maybe for hours, and a person could not tell it from a hang."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import time

from conftest import jobs, manifest, wait_for
from test_audit_os import wait_line


def _read_until(path, needle: str, proc: subprocess.Popen, timeout: float = 20) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        text = path.read_text()
        if needle in text:
            return text
        assert proc.poll() is None, text
        time.sleep(0.05)
    raise AssertionError(f"{needle!r} never said: {path.read_text()!r}")


def test_until_idle_says_which_process_holds_the_jobs_it_waits_for(afc):
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    other = "render-02:4242:777"  # another host's live worker, its lease far from its end
    with sqlite3.connect(afc.cwd / "afc.db") as conn:
        conn.execute(
            "UPDATE jobs SET lease_owner = ?, lease_expires = ?", (other, time.time() + 3600)
        )
    log = afc.cwd / "worker.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            afc.command("worker", "--until-idle", "--poll", "0.1"),
            cwd=afc.cwd,
            env=afc.env,
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
        )
    try:
        said = _read_until(log, other, proc)
        assert "2 job" in said and "--until-idle" in said, said
        time.sleep(0.5)  # a few polls more: said once, not at every poll
        assert log.read_text().count(other) == 1, log.read_text()
        with sqlite3.connect(afc.cwd / "afc.db") as conn:  # that worker let them go
            conn.execute("UPDATE jobs SET lease_owner = NULL, lease_expires = NULL")
        assert proc.wait(timeout=60) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",), ("succeeded",)]


def test_until_idle_stopped_by_sigterm_before_it_went_idle_exits_130(afc):
    """A script's worker ('timeout 1h afc worker --until-idle && publish') stopped before it
    went idle exited 0, and the script went on as if the batch were done, with jobs left to
    run; 'afc resume' interrupted so exits 130 (README's exit codes)."""
    release = afc.cwd / "release"
    afc.write_manifest(manifest(jobs(4)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    env = {"AFC_LOCAL_RELEASE": str(release)}
    proc = afc.popen("worker", "--until-idle", "--concurrency", "1", "--poll", "0.1", env=env)
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 1)
        proc.send_signal(signal.SIGTERM)
        wait_line(proc, "stopping: no new provider calls")
        release.touch()  # the call in flight answers: drained, recorded
        assert proc.wait(timeout=60) == 130, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    counts = dict(afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status"))
    assert counts == {"succeeded": 1, "queued": 3}, counts
    # run again, it goes idle: 0
    assert afc("worker", "--until-idle", "--poll", "0.1", env=env).returncode == 0


def test_lease_holders_counts_other_owners_active_jobs(afc, ledger_url):
    """``Ledger.lease_holders`` on both engines: other owners' leases of active jobs, by
    owner; not this process's own, nor a finished job's."""
    from afc_cli.costs import RateCards
    from afc_cli.ledger import Ledger
    from afc_cli.manifest import load_manifest

    ledger = Ledger(ledger_url)
    try:
        m = load_manifest(afc.write_manifest(manifest(jobs(4))))
        ledger.admit(m, f"file://{afc.cwd}/out", RateCards())
        owners = ["render-02:1:1", "render-02:1:1", ledger.owner, "render-03:2:2"]
        for job, owner in zip(m.jobs, owners, strict=True):
            with ledger.tx():
                ledger.db.execute(
                    "UPDATE jobs SET lease_owner = ?, lease_expires = ? WHERE id = ?",
                    (owner, time.time() + 60, job.job_id),
                )
        with ledger.tx():
            ledger.db.execute(
                "UPDATE jobs SET status = 'succeeded' WHERE id = ?", (m.jobs[3].job_id,)
            )
        assert ledger.lease_holders() == {"render-02:1:1": 2}
        assert ledger.lease_holders("b1") == {"render-02:1:1": 2}
    finally:
        ledger.close()
