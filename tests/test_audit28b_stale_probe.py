"""A job whose probe was an earlier run's looks at its storage again before it pays
(outside audit 28b)."""

from __future__ import annotations

from conftest import jobs, manifest


def test_a_job_stopped_by_the_budget_after_its_probe_looks_again_before_paying(afc):
    """One job is stopped by --max-spend after its probe found its key free: the ledger
    keeps it waiting at its render step, no attempt made. Another ledger sharing the
    storage then renders and stores it. The next resume paid for a render of an output
    already stored (the render step heads the key only for a job with attempts), then found
    the object at its store step: two renders paid for one output (with a provider whose
    bytes differ, or a request the other ledger admitted differently, a conflict at store)."""
    afc.write_manifest(manifest(jobs(2)))
    first = afc("submit", "manifest.yaml", "--max-spend", "0.05")
    assert first.returncode == 4, first.stderr
    [(key,)] = afc.rows("SELECT key FROM jobs WHERE status = 'waiting' AND step = 'render'")
    other = afc("submit", "manifest.yaml", "--ledger", "other.db")
    assert other.returncode == 0, other.stderr

    resumed = afc("resume", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert afc.rows("SELECT status FROM jobs WHERE key = ?", (key,)) == [("succeeded",)]
    # nothing paid: the resume found the other ledger's object, its render avoided
    assert afc.rows(
        "SELECT COUNT(*) FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE j.key = ?", (key,)
    ) == [(0,)]
    assert afc.rows(
        "SELECT COUNT(*) FROM avoided v JOIN jobs j ON j.id = v.job_id WHERE j.key = ?", (key,)
    ) == [(1,)]
