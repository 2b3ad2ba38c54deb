"""Two machines whose workers share one AFC_HOST_ID (a worker.env copied to every machine):
each takes the other's live jobs over at once, its pids being no processes of this machine,
and both pay for them. Nothing said why: the job's line read 'taken over by another afc
process'. The worker that loses a job so now names the cause (outside audit 27c)."""

from __future__ import annotations

import sqlite3

from conftest import jobs, manifest, wait_for


def test_a_job_taken_by_this_host_id_from_no_process_here_names_the_shared_host_id(afc):
    release = afc.cwd / "release"
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    env = {"AFC_LOCAL_RELEASE": str(release), "AFC_HOST_ID": "render-07"}
    proc = afc.popen("worker", "--until-idle", "--poll", "0.1", env=env)
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 1)
        # the other machine's worker, 'render-07' too, took the job over (its pid 999999
        # is no process here)
        with sqlite3.connect(afc.cwd / "afc.db") as conn:
            conn.execute("UPDATE jobs SET lease_owner = 'render-07:999999:12345'")
        release.touch()
        proc.wait(timeout=60)
        said = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "taken over" in said, said
    assert "AFC_HOST_ID" in said and "render-07:999999:12345" in said, said
