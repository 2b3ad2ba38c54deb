"""Outside audit 57f: an ``afc worker --until-idle`` (a script's worker) stopped by a signal
before it went idle, that then meets an expected error of its own in its grace period (a
paid render its spool cannot keep), says the error and exits 130, as README's exit codes
have it for such a worker and for a submit or resume ('130 wins over every other code'),
not 1."""

from __future__ import annotations

import signal
from pathlib import Path

from conftest import manifest, wait_for


def test_a_spool_error_in_the_grace_period_of_a_stopped_until_idle_worker_exits_130(afc):
    """The job's call is held by the fake provider; SIGTERM (a CI job's timeout); once the
    worker says it is stopping, a folder is put where the job's spool file goes, and the call
    let go: its render, paid and recorded, cannot be spooled. The worker said so and exited
    1, which the script reads as a job failed, though its job stays resumable (queued) as an
    interrupted resume's does; it now exits 130, the error still said."""
    release = str(afc.cwd / "release")
    afc.write_manifest(manifest([{"key": "a", "prompt": "a"}]))
    assert afc("submit", "manifest.yaml", "--no-run", "-q").returncode == 0
    run = afc.popen("worker", "--until-idle", "--poll", "0.05", env={"AFC_LOCAL_RELEASE": release})
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts", 1)
        [(job_id,)] = afc.rows("SELECT id FROM jobs")
        run.send_signal(signal.SIGTERM)
        said = ""
        while "stopping" not in said:
            line = run.stderr.readline()
            assert line, said
            said += line
        (afc.cwd / "afc.db-spool" / f"{job_id}.spool").mkdir(parents=True)
        Path(release).write_text("")
        code = run.wait(timeout=60)
        said += run.stderr.read()
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert "cannot keep the output of b1/a in the spool" in said, said
    assert "Traceback" not in said
    assert afc.rows("SELECT number, status FROM attempts") == [(1, "succeeded")]
    assert afc.rows("SELECT status FROM jobs") == [("queued",)]
    assert code == 130, said


def test_a_service_worker_keeps_the_errors_own_code(afc):
    """The same for a service's worker (no --until-idle), whose SIGTERM is its normal end
    (exit 0): an error met in its grace period keeps its own code, 1, which a supervisor
    reads as a failure to look at (Restart=on-failure restarts it either way). Only a
    script's worker takes 130 for it; a mutant giving every worker 130 passed every test."""
    release = str(afc.cwd / "release")
    afc.write_manifest(manifest([{"key": "a", "prompt": "a"}]))
    assert afc("submit", "manifest.yaml", "--no-run", "-q").returncode == 0
    run = afc.popen("worker", "--poll", "0.05", env={"AFC_LOCAL_RELEASE": release})
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts", 1)
        [(job_id,)] = afc.rows("SELECT id FROM jobs")
        run.send_signal(signal.SIGTERM)
        said = ""
        while "stopping" not in said:
            line = run.stderr.readline()
            assert line, said
            said += line
        (afc.cwd / "afc.db-spool" / f"{job_id}.spool").mkdir(parents=True)
        Path(release).write_text("")
        code = run.wait(timeout=60)
        said += run.stderr.read()
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert "cannot keep the output of b1/a in the spool" in said, said
    assert "Traceback" not in said
    assert afc.rows("SELECT status FROM jobs") == [("queued",)]
    assert code == 1, said
