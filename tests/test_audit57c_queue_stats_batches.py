"""Outside audit 57c: ``afc queue stats`` (the alert a cron runs every few minutes) sent seven
statements for every batch the ledger ever admitted, most of them for statuses none of that
batch's jobs has: the oldest queued, running and waiting job, the jobs running and waiting,
the failed dependents and the oldest review, each looked up batch by batch. A nightly cron
admits a batch a night, and a studio's ledger had 1,000 batches after a few years: 7,017
statements, about 2 s a look on SQLite, growing with every night. The counts by batch and
status are read first anyway; the look-ups are now made only where those counts have jobs."""

from __future__ import annotations

import sqlite3

from conftest import jobs, manifest

from afc_cli.costs import RateCards
from afc_cli.ledger import Ledger
from afc_cli.manifest import load_manifest
from afc_cli.ops import queue_stats


def _ledger(path: str, afc, batches: int) -> None:
    """``batches`` finished batches of two jobs, and one with a job of each kind the figures
    count: queued, running (its run gone), waiting, failed, dead, awaiting review."""
    ledger = Ledger(path)
    try:
        for b in range(batches):
            m = load_manifest(afc.write_manifest(manifest(jobs(2), batch=f"night-{b:04d}")))
            ledger.admit(m, "file:///tmp/x", RateCards())
        with ledger.tx():
            ledger.db.execute("UPDATE jobs SET status = 'succeeded'")
        m = load_manifest(afc.write_manifest(manifest(jobs(6), batch="today")))
        ledger.admit(m, "file:///tmp/x", RateCards())
        with ledger.tx():
            for job, status in zip(
                m.jobs,
                ["queued", "running", "waiting", "failed", "dead", "awaiting_review"],
                strict=True,
            ):
                ledger.db.execute(
                    "UPDATE jobs SET status = ?, review_at = created_at, lease_owner ="
                    " CASE WHEN ? = 'running' THEN 'gone-host:1' END, lease_expires = 1,"
                    " lease_mono = 1 WHERE id = ?",
                    (status, status, job.job_id),
                )
    finally:
        ledger.close()


def _counted(monkeypatch, path: str) -> tuple[dict, int]:
    sent: list[str] = []
    connect = sqlite3.connect

    def traced(*args, **kwargs):
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(sent.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced)
    try:
        stats, _ = queue_stats(path)
    finally:
        monkeypatch.undo()
    return stats, sum(1 for sql in sent if "FROM jobs" in sql)


def test_queue_stats_does_not_look_up_every_batch_ever_admitted(tmp_path, afc, monkeypatch):
    few, many = str(tmp_path / "few.db"), str(tmp_path / "many.db")
    _ledger(few, afc, 2)
    _ledger(many, afc, 40)
    stats_few, sent_few = _counted(monkeypatch, few)
    stats_many, sent_many = _counted(monkeypatch, many)
    assert sent_many == sent_few, (sent_few, sent_many)
    # the same figures whatever the history
    assert stats_few == stats_many
    assert stats_many["queued"] == 1
    assert stats_many["in_flight"] == 0  # its run is gone
    assert stats_many["process_gone"] == 1
    assert stats_many["delayed"] == 1
    assert stats_many["failed"] == 1 and stats_many["dlq"] == 1 and stats_many["stuck"] == 2
    assert stats_many["awaiting_review"] == 1
    assert stats_many["oldest_age_seconds"] >= 0


def test_a_killed_runs_waiting_job_is_counted_gone_not_delayed(afc):
    """A run killed while its job waits out a provider's Retry-After leaves the job 'waiting'
    under a dead process's lease: 'afc queue stats' counts it process_gone (an alert on
    'process_gone>0' fires), not delayed. Its leases are looked up in the batches that have
    running or waiting jobs: looked up in those with running ones alone, a batch with none
    running (here, its one job waiting) was left out, the job counted delayed, no alert."""
    import signal

    from conftest import wait_for

    afc.write_manifest(manifest(jobs(1, fail=["rate_limited"], retry_after_s=50)))
    proc = afc.popen("submit", "manifest.yaml")
    try:
        wait_for(afc, "SELECT COUNT(*) FROM jobs WHERE status = 'waiting'", 1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert afc.rows("SELECT status FROM jobs") == [("waiting",)]
    stats = afc.json("queue", "stats")
    assert (stats["in_flight"], stats["delayed"], stats["process_gone"]) == (0, 0, 1), stats
    alert = afc("queue", "stats", "--fail-if", "process_gone>0")
    assert alert.returncode == 1 and "process_gone=1" in alert.stderr
