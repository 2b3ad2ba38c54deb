"""Outside audit 55b (commands run against a ledger a run is using): a job cancelled while its
run waits for the provider's limit that the ledger's other processes hold."""

from __future__ import annotations

import subprocess

from conftest import manifest, wait_for


def test_a_job_cancelled_while_it_waits_for_the_shared_limit_ends_its_run(afc):
    """One call of the provider at once across the ledger: batch b1's run holds it (a long
    render, here held until the test lets it go), and batch b2's run waits for it with its
    only job, asking again every half second. A person cancels that job: the run went on
    waiting, and its 'afc submit' did not end, until the other call ended (a video's: many
    minutes), since the limit refuses the attempt before the attempt looks at the job (a
    wait for an output key looked already). It now ends at its next look, the job
    cancelled, nothing started, while the other call still renders."""
    release = afc.cwd / "release"
    env = {"AFC_LOCAL_RELEASE": str(release)}
    limits = {"local": {"concurrency": 1}}
    afc.write_manifest(manifest([{"key": "x", "prompt": "a"}], batch="b2", limits=limits), "x.yaml")
    afc.write_manifest(manifest([{"key": "long", "prompt": "b"}], limits=limits), "long.yaml")
    (afc.cwd / "release.x").touch()  # x's own call, were it made, answers at once
    holding = afc.popen("submit", "long.yaml", env=env)
    waiting = None
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 1)
        waiting = afc.popen("submit", "x.yaml", env=env)
        # claimed (its lease), and refused by the limit: no attempt row of its own
        wait_for(afc, "SELECT COUNT(*) FROM jobs WHERE key = 'x' AND lease_owner IS NOT NULL", 1)
        cancelled = afc("cancel", "x", "--batch", "b2")
        assert cancelled.returncode == 0, cancelled.stderr
        try:
            code = waiting.wait(timeout=30)
        except subprocess.TimeoutExpired:
            code = None
        assert code == 1, "the run went on waiting for the provider's limit for a cancelled job"
        assert afc.rows("SELECT status FROM attempts") == [("started",)]  # b1's, still held
        release.touch()
        assert holding.wait(timeout=60) == 0, holding.stderr.read()
    finally:
        release.touch()
        for proc in (waiting, holding):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    assert sorted(afc.rows("SELECT key, status FROM jobs")) == [
        ("long", "succeeded"),
        ("x", "cancelled"),
    ]


def test_a_job_cancelled_while_it_waits_for_a_shared_budgets_other_calls_ends_its_worker(afc):
    """The same wait for another process's calls, under one budget for all workers (README):
    batch b1's worker holds two calls reserving the whole cap, and batch b2's worker waits
    with its job for their ends, looking again every two seconds (the budget refuses the
    attempt before it looks at the job). Cancelled there, the job kept its worker waiting
    (--until-idle never went idle) until those calls ended; it now ends at the next look."""
    release = afc.cwd / "release"
    env = {**afc.env, "AFC_LOCAL_RELEASE": str(release)}
    rates = [{"provider": "local", "model": "m1", "per_image": "0.01"}]
    held = manifest([{"key": f"h{i}", "prompt": f"h{i}"} for i in range(2)], rates=rates)
    afc.write_manifest(held, "held.yaml")
    afc.write_manifest(manifest([{"key": "x", "prompt": "x"}], batch="b2", rates=rates), "x.yaml")
    for name in ("held.yaml", "x.yaml"):
        assert afc("submit", name, "--no-run").returncode == 0
    budget = ("--budget", "night", "--max-spend", "0.02", "--until-idle", "--poll", "0.1")
    holding = subprocess.Popen(
        afc.command("worker", "--batch", "b1", *budget),
        cwd=afc.cwd,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    waiting = None
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 2)
        waiting = subprocess.Popen(
            afc.command("worker", "--batch", "b2", *budget),
            cwd=afc.cwd,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_for(afc, "SELECT COUNT(*) FROM jobs WHERE key = 'x' AND lease_owner IS NOT NULL", 1)
        cancelled = afc("cancel", "x", "--batch", "b2")
        assert cancelled.returncode == 0, cancelled.stderr
        try:
            code = waiting.wait(timeout=30)
        except subprocess.TimeoutExpired:
            code = None
        assert code == 1, "the worker went on waiting for the budget for a cancelled job"
        release.touch()
        assert holding.wait(timeout=60) == 0, holding.stderr.read()
    finally:
        release.touch()
        for proc in (waiting, holding):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    assert afc.rows("SELECT key, status FROM jobs WHERE batch = 'b2'") == [("x", "cancelled")]
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(2,)]  # x started nothing
