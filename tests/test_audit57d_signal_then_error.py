"""Outside audit 57d: a run a signal stops that then meets an expected error of its own in
its grace period (a paid render its spool cannot keep) says the error and exits 130, as
README's exit codes have it ('130 wins over every other code'), not 1."""

from __future__ import annotations

import signal
from pathlib import Path

from conftest import manifest, wait_for


def test_a_spool_error_in_the_grace_period_of_a_ctrl_c_exits_130(afc):
    """The job's call is held by the fake provider; Ctrl-C; once the run says it is stopping,
    a folder is put where the job's spool file goes, and the call let go: its render, paid
    and recorded, cannot be spooled (SpoolError). The run said so and exited 1, which a
    script reads as a job failed, where the person had interrupted it and every job stays
    resumable; it now exits 130, the error still said."""
    release = str(afc.cwd / "release")
    afc.write_manifest(manifest([{"key": "a", "prompt": "a"}]))
    run = afc.popen("submit", "manifest.yaml", env={"AFC_LOCAL_RELEASE": release})
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts", 1)
        [(job_id,)] = afc.rows("SELECT id FROM jobs")
        run.send_signal(signal.SIGINT)
        first = run.stderr.readline()
        assert "stopping: no new provider calls" in first, first
        (afc.cwd / "afc.db-spool" / f"{job_id}.spool").mkdir(parents=True)
        Path(release).write_text("")
        code = run.wait(timeout=60)
        said = first + run.stderr.read()
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert "cannot keep the output of b1/a in the spool" in said, said
    assert "Traceback" not in said
    assert code == 130, said
    assert afc.rows("SELECT number, status FROM attempts") == [(1, "succeeded")]
    assert afc.rows("SELECT status FROM jobs") == [("queued",)]
