"""Outside audit 55g: a spool file removed as its upload begins."""

from __future__ import annotations

import signal

from conftest import frozen_at, manifest


def test_a_spool_file_removed_as_its_upload_begins_is_a_storage_failure(afc, s3):
    """The spool file was checked, then removed (a person cleaning ./afc-spool, a disk
    remounted) in the instant before its upload measured it: the size look's OSError went
    up raw, as an error of afc's own: the run stopped, every other job's work with it. It is
    the job's failed store: the job waits at its store step, and the render is not paid
    again."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    proc = afc.popen(
        "submit", "manifest.yaml", "--storage", s3.url, env={"AFC_STALL_POINT": "spool_checked"}
    )
    try:
        frozen_at(proc)
        (spooled,) = (afc.cwd / "afc.db-spool").glob("*.spool")
        spooled.unlink()
        proc.send_signal(signal.SIGCONT)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read()
    assert code == 1, err
    assert "error of its own" not in err, err
    [(status, step, reason)] = afc.rows("SELECT status, step, waiting_reason FROM jobs")
    assert (status, step) == ("waiting", "store"), err
    assert "No such file or directory" in reason
