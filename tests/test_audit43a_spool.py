"""Outside audit 43a: the spool, where a render's paid bytes wait for the storage."""

from __future__ import annotations

import sqlite3

from conftest import manifest, wait_for
from test_full_disk import afc_line, in_namespace, namespace, write_manifest  # noqa: F401


def test_a_full_spool_names_every_paid_render_it_could_not_keep(afc, namespace):  # noqa: F811
    """A spool disk that fills (its own small file system, the outputs stored on another)
    stops the run at the first render whose bytes cannot be written; the calls in flight
    finish, and their renders' writes fail on the same full disk. The run's one message named
    only the first job ('Its render (attempt 1) is recorded with its cost ... the job renders
    again'): the other paid renders lost beside it (11 of 40 at --concurrency 8) were said
    nowhere but in each job's events, and a user counted one render to pay for again."""
    write_manifest(afc, 40)
    script = "\n".join(
        [
            "mkdir -p afc.db-spool && mount -t tmpfs -o size=100k tmpfs afc.db-spool || exit 9",
            f"{afc_line(afc, 'submit', 'manifest.yaml', '--ledger', 'afc.db', min_free='0')}"
            " > first.out 2> first.err; echo $? > first.rc",
            "exit 0",
        ]
    )
    result = in_namespace(afc, script)
    assert result.returncode == 0, result.stderr
    err = (afc.cwd / "first.err").read_text()
    assert (afc.cwd / "first.rc").read_text().strip() == "1", err
    assert "Traceback" not in err
    with sqlite3.connect(afc.cwd / "afc.db") as db:
        lost = [
            f"b1/{key}"
            for (key,) in db.execute(
                "SELECT j.key FROM events e JOIN jobs j ON j.id = e.job_id"
                " WHERE e.kind = 'spool_failed' ORDER BY j.seq"
            )
        ]
    assert len(lost) >= 2, (lost, err)  # the calls in flight met the full disk too
    message = err.strip().splitlines()[-1]
    assert "cannot keep the output of" in message
    assert f"{len(lost) - 1} more paid renders could not be kept either" in message, message
    assert all(job in message for job in lost[:4]), (lost, message)


def test_a_cancelled_jobs_late_render_leaves_the_spool_once_stored(afc, fake):
    """A call that answers after 'afc cancel' is stored under the job's output key (README
    "Cancel"), its bytes written to the spool as ``<job id>.late`` first. The file stayed after
    the store, for good: no run reads a ``.late`` file, and the spool is swept of a job's
    files only once the job's own output is verified, which a job left cancelled never is.
    Every late render of a cancelled job (a video of gigabytes, with S3 storage) stayed on the
    spool's disk until no render could start there. A retry still finds the stored output and
    pays for nothing."""
    data = manifest([{"key": "j", "prompt": "slow-2s please"}])
    data["defaults"]["chain"] = [{"provider": "openai", "model": "gpt-image-1", "attempts": 1}]
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml")
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts", 1)
        assert afc("cancel", "j").returncode == 0
    finally:
        proc.wait(timeout=60)
    assert afc.rows("SELECT kind FROM events WHERE kind = 'late_result_stored'")
    assert (afc.outputs() / "b1" / "j.png").exists()
    assert sorted(p.name for p in (afc.cwd / "afc.db-spool").iterdir() if p.name[0] != ".") == []
    calls = afc.rows("SELECT COUNT(*) FROM attempts")[0][0]
    retried = afc("retry", "j")
    assert retried.returncode == 0, retried.stderr
    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert afc.rows("SELECT COUNT(*) FROM attempts")[0][0] == calls  # nothing paid again
