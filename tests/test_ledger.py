"""Ledger rules: first terminal state wins, attempt upserts, takeover of a dead owner."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from conftest import jobs, manifest

from afc_cli.costs import RateCards
from afc_cli.ledger import JobLost, Ledger
from afc_cli.manifest import load_manifest


@pytest.fixture
def ledger_with_job(afc):
    path = afc.write_manifest(manifest(jobs(1)))
    ledger = Ledger(afc.cwd / "afc.db")
    m = load_manifest(path)
    ledger.admit(m, "file:///tmp/x", RateCards())
    job = ledger.job(m.jobs[0].job_id)
    yield ledger, job
    ledger.close()


def test_first_terminal_state_wins(ledger_with_job):
    ledger, job = ledger_with_job
    assert ledger.finish(job, "cancelled", step="render") is True
    assert ledger.finish(job, "succeeded", step="finish") is False
    assert ledger.finish(job, "failed", step="render", error_message="late") is False
    row = ledger.job(job["id"])
    assert row["status"] == "cancelled" and row["error_message"] is None
    kinds = [e["kind"] for e in ledger.events(job["id"])]
    assert kinds.count("cancelled") == 1 and "succeeded" not in kinds
    # and nothing else moves a terminal job either
    with pytest.raises(JobLost):
        ledger.checkpoint(row, [("probe", None)], "render", outcome="rendered")
    after = ledger.job(job["id"])
    assert ledger.steps(job["id"]) == [], "the refused checkpoint wrote nothing"
    assert (after["step"], after["outcome"]) == (row["step"], row["outcome"])


def test_attempt_report_upsert_keeps_first_outcome(ledger_with_job):
    ledger, job = ledger_with_job
    job = ledger.claim(job["id"], 60)
    number = ledger.start_attempt(job, 0, "local", "m1", None, durable=False)
    common = {"chain_index": 0, "provider": "local", "model": "m1"}
    ledger.end_attempt(
        job,
        number,
        **common,
        status="failed",
        error_class="timeout",
        error_message="first",
        started_at=100.0,
        ended_at=101.0,
    )
    # the same report again, now carrying usage and cost, and claiming another outcome
    ledger.end_attempt(
        job,
        number,
        **common,
        status="succeeded",
        error_class=None,
        error_message="second",
        usage={"seconds": 3.2},
        cost_micros=3840,
        cost_source="derived",
        started_at=200.0,
        ended_at=205.0,
    )
    rows = ledger.attempts(job["id"])
    assert len(rows) == 1
    row = rows[0]
    assert (row["status"], row["error_class"], row["error_message"]) == (
        "failed",
        "timeout",
        "first",
    )
    assert row["ended_at"] == 101.0
    assert (row["cost_micros"], row["cost_source"]) == (3840, "derived")
    assert row["usage_json"] == '{"seconds":3.2}'


def test_claim_from_dead_owner_marks_started_attempts_unknown(ledger_with_job, afc):
    ledger, job = ledger_with_job
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    import socket

    ghost = f"{socket.gethostname()}:{int(dead.stdout)}:1"
    with ledger.tx():
        ledger.db.execute(
            "UPDATE jobs SET lease_owner = ?, lease_expires = 9e18, attempts = 1 WHERE id = ?",
            (ghost, job["id"]),
        )
        ledger.db.execute(
            "INSERT INTO attempts (job_id, number, chain_index, provider, model, status, owner,"
            " started_at) VALUES (?, 1, 0, 'local', 'm1', 'started', ?, 0)",
            (job["id"], ghost),
        )
    claimed = ledger.claim(job["id"], 60)
    assert claimed is not None and claimed["lease_owner"] == ledger.owner
    assert claimed["takeovers"] == 1
    assert [a["status"] for a in ledger.attempts(job["id"])] == ["unknown"]


def test_claim_refuses_a_live_owner(ledger_with_job):
    ledger, job = ledger_with_job
    import os
    import socket

    from afc_cli.owner import _start_ticks

    parent = os.getppid()
    live = f"{socket.gethostname()}:{parent}:{_start_ticks(parent)}"
    with ledger.tx():
        ledger.db.execute(
            "UPDATE jobs SET lease_owner = ?, lease_expires = 9e18 WHERE id = ?", (live, job["id"])
        )
    assert ledger.claim(job["id"], 60) is None


def test_racing_admissions_make_one_job_row(afc):
    afc.write_manifest(manifest(jobs(200)))
    script = textwrap.dedent(
        """
        import sys
        from afc_cli.costs import RateCards
        from afc_cli.ledger import Ledger
        from afc_cli.manifest import load_manifest
        m = load_manifest("manifest.yaml")
        ledger = Ledger("afc.db")
        result = ledger.admit(m, "file:///tmp/x", RateCards())
        print(len(result.new), len(result.replayed), len(result.conflicts))
        """
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script], cwd=afc.cwd, stdout=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=60)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(int(o[0]) for o in outs) == 200
    assert all(int(o[2]) == 0 for o in outs)
    assert afc.rows("SELECT COUNT(*), COUNT(DISTINCT id) FROM jobs") == [(200, 200)]
