"""Outside audit 56a: a job a person cancels while its run waits between attempts (a backoff,
the run's own per-minute limit of its provider) ends that wait, and a one-shot 'afc submit' whose
last job it was ends with it, not when the wait would have run out (up to a minute)."""

from __future__ import annotations

import subprocess

from conftest import manifest, wait_for


def _ends_soon(proc: subprocess.Popen) -> int | None:
    """The run's exit code, or None if it was still waiting well before its wait ran out."""
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        return None


def test_a_job_cancelled_in_its_backoff_ends_its_submit(afc):
    """The provider answers 429 with a Retry-After of an hour: the job waits its backoff's cap,
    60 s, its run holding no call. A person cancels it after a moment: the submit went on for
    the rest of the minute before its next attempt found the job cancelled. The run's periodic
    look at its resting jobs now wakes it, and the submit ends (exit 1, the job cancelled),
    with the one 429 attempt only."""
    chain = [
        {
            "provider": "local",
            "model": "m1",
            "attempts": 3,
            "backoff": {"base": 60, "cap": 60},
        }
    ]
    job = {"key": "x", "prompt": "a", "params": {"fail": ["rate_limited"], "retry_after_s": 3600}}
    afc.write_manifest(manifest([job], defaults={"chain": chain}))
    run = afc.popen("submit", "manifest.yaml")
    try:
        wait_for(afc, "SELECT COUNT(*) FROM jobs WHERE status = 'waiting'", 1)
        cancelled = afc("cancel", "x", "--batch", "b1")
        assert cancelled.returncode == 0, cancelled.stderr
        code = _ends_soon(run)
        assert code == 1, "the submit waited out the backoff of a job the person cancelled"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert afc.rows("SELECT status FROM jobs") == [("cancelled",)]
    assert afc.rows("SELECT number, status FROM attempts") == [(1, "failed")]


def test_a_job_cancelled_while_it_waits_for_the_minute_ends_its_submit(afc):
    """``limits: {local: {per_minute: 1}}``: of two jobs, the first renders and the second
    waits for the minute's end in this run (``ProviderLimit``). Cancelled there, it kept the
    submit open for the rest of the minute; it now ends at the run's next look."""
    limits = {"local": {"per_minute": 1}}
    jobs = [{"key": "a", "prompt": "a"}, {"key": "b", "prompt": "b"}]
    afc.write_manifest(manifest(jobs, limits=limits))
    run = afc.popen("submit", "manifest.yaml", "--concurrency", "2")
    try:
        wait_for(afc, "SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'", 1)
        left = afc.rows("SELECT key FROM jobs WHERE status <> 'succeeded'")
        assert len(left) == 1
        cancelled = afc("cancel", left[0][0], "--batch", "b1")
        assert cancelled.returncode == 0, cancelled.stderr
        code = _ends_soon(run)
        assert code == 1, "the submit waited out the minute for a job the person cancelled"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert sorted(s for (s,) in afc.rows("SELECT status FROM jobs")) == ["cancelled", "succeeded"]
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(1,)]


def test_a_job_cancelled_while_it_waits_for_another_runs_minute_ends_its_submit(afc):
    """The same ``per_minute: 1`` held across the ledger: batch b1's submit started the
    minute's one call and ended; batch b2's submit, a process of its own, is refused its
    attempt row (``ProviderBusy``) and waits out the rest of that minute, jittered (up to
    90 s). Cancelled there, its job kept the submit open until that wait ended (it looked
    only then, tests/test_audit55b_cancel_limit_wait.py); it now ends at the run's next look."""
    limits = {"local": {"per_minute": 1}}
    afc.write_manifest(manifest([{"key": "a", "prompt": "a"}], limits=limits), "a.yaml")
    afc.write_manifest(manifest([{"key": "x", "prompt": "x"}], batch="b2", limits=limits), "x.yaml")
    first = afc("submit", "a.yaml")
    assert first.returncode == 0, first.stderr
    run = afc.popen("submit", "x.yaml")
    try:
        # claimed (its lease), and refused by the limit: no attempt row of its own
        wait_for(afc, "SELECT COUNT(*) FROM jobs WHERE key = 'x' AND lease_owner IS NOT NULL", 1)
        cancelled = afc("cancel", "x", "--batch", "b2")
        assert cancelled.returncode == 0, cancelled.stderr
        code = _ends_soon(run)
        assert code == 1, "the submit waited out another run's minute for a cancelled job"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert sorted(afc.rows("SELECT key, status FROM jobs")) == [
        ("a", "succeeded"),
        ("x", "cancelled"),
    ]
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(1,)]


def test_the_look_at_resting_jobs_finds_the_cancelled_and_taken_over_on_both_engines(
    afc, ledger_url
):
    """``Ledger.not_held``, the one read the run makes of its resting jobs: of three claimed
    jobs, the one a person cancelled and the one another process took over are no longer the
    run's; the third still is."""
    from conftest import jobs

    from afc_cli.costs import RateCards
    from afc_cli.ledger import Ledger
    from afc_cli.manifest import load_manifest

    m = load_manifest(afc.write_manifest(manifest(jobs(3))))
    ledger = Ledger(ledger_url)
    try:
        ledger.admit(m, "file:///tmp/x", RateCards())
        kept, cancelled, taken = (ledger.claim(j.job_id, 60) for j in m.jobs)
        ledger.cancel(cancelled, "a person's cancel")
        with ledger.tx():
            ledger.db.execute(
                "UPDATE jobs SET lease_owner = 'elsewhere:1:1' WHERE id = ?", (taken["id"],)
            )
        ids = [kept["id"], cancelled["id"], taken["id"]]
        assert ledger.not_held(ids) == {cancelled["id"], taken["id"]}
    finally:
        ledger.close()
