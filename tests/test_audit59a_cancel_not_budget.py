"""Outside audit 59a: a run whose jobs waiting on its budget were cancelled by a person did not
stop by the budget.

A submit under ``--max-spend`` with room for one call: one job's call is in flight (held here
until the test lets it go), the other waits for that call's end (it might come back free and
leave room, README "Budget"). A person cancels the waiting one meanwhile. Once the held call
came back paid, the waiting job asked the budget again, which refuses before the attempt looks at
the job: the run took the refusal of a cancelled job for the budget's stop, exited 4, said
'stopped by the budget of 0.050000 USD: ... every waiting job resumes with 'afc resume'' and
``stopped_by_budget: true`` in ``--json``, though no job waited and a resume had nothing to
do. The job is cancelled: exit 1, as any submit of a manifest listing a cancelled job.

Which of the two jobs reaches the budget first is the run's two workers' race (the whole suite
once saw ``second`` win it), so the test cancels whichever job is left waiting."""

from __future__ import annotations

from conftest import manifest, wait_for


def test_a_cancelled_job_the_budget_then_refuses_is_no_budget_stop(afc):
    release = afc.cwd / "release"
    env = {"AFC_LOCAL_RELEASE": str(release)}
    afc.write_manifest(
        manifest([{"key": "first", "prompt": "a"}, {"key": "second", "prompt": "b"}])
    )
    run = afc.popen("submit", "manifest.yaml", "--max-spend", "0.05", env=env)
    try:
        # one job's call in flight, reserving the whole cap; the other claimed, with no attempt
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 1)
        [(held,)] = afc.rows(
            "SELECT j.key FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE a.status = 'started'"
        )
        waiting = {"first": "second", "second": "first"}[held]
        wait_for(
            afc, f"SELECT COUNT(*) FROM jobs WHERE key = '{waiting}' AND lease_owner IS NOT NULL", 1
        )
        cancelled = afc("cancel", waiting, "--batch", "b1")
        assert cancelled.returncode == 0, cancelled.stderr
        release.touch()
        code = run.wait(timeout=60)
        err = run.stderr.read()
    finally:
        release.touch()
        if run.poll() is None:
            run.kill()
            run.wait()
    assert sorted(afc.rows("SELECT key, status FROM jobs")) == sorted(
        [(held, "succeeded"), (waiting, "cancelled")]
    )
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(1,)]  # the cancelled job started nothing
    assert "stopped by the budget" not in err, err
    assert code == 1, err
