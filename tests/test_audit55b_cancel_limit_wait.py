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
