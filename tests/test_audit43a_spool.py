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


def test_renders_in_flight_when_the_ledger_disk_fills_are_kept_in_the_spool(
    afc,
    namespace,  # noqa: F811
):
    """README (exit 1): a run stopped because the ledger could not be written keeps the renders
    of its calls in flight in the spool, and the next run stores them without paying again.
    A render whose cost was known (every priced synchronous answer: OpenAI, Gemini, local)
    waited at its spool step for its cost's commit, after taking its bytes out of the run's
    list of renders not yet spooled (``keep_rendered``'s): the failed commit raised there,
    and the bytes were dropped. With the ledger's disk full as 8 calls answered (the spool on
    a disk of its own, with room), 1 render was kept and 7 were paid for again by the resume
    (cost unknown, 'the provider may have charged for it')."""
    write_manifest(afc, 8)
    ledger = "disk/afc.db"
    script = "\n".join(
        [
            "mkdir -p disk && mount -t tmpfs -o size=2m tmpfs disk || exit 9",
            "mkdir -p disk/afc.db-spool && mount -t tmpfs -o size=20m tmpfs disk/afc.db-spool"
            " || exit 9",
            f"AFC_LOCAL_RELEASE=$PWD/release "
            f"{afc_line(afc, 'submit', 'manifest.yaml', '--ledger', ledger, min_free='0')}"
            " > first.out 2> first.err &",
            "pid=$!",
            "n=0; while [ $(cat calls.log 2>/dev/null | wc -l) -lt 8 ] && [ $n -lt 3000 ]; do"
            " sleep 0.01; n=$((n+1)); done",
            "head -c 4000000 /dev/zero > disk/filler 2>/dev/null",
            "touch release",
            "wait $pid; echo $? > first.rc",
            "ls disk/afc.db-spool > spool.ls",
            "cp calls.log first-calls.log",
            "rm disk/filler",
            f"{afc_line(afc, 'resume', '--ledger', ledger, min_free='0')}"
            " > second.out 2> second.err; echo $? > second.rc",
            "cp disk/afc.db ledger-copy.db; cp disk/afc.db-wal ledger-copy.db-wal 2>/dev/null",
            "exit 0",
        ]
    )
    result = in_namespace(afc, script)
    assert result.returncode == 0, result.stderr
    first_err = (afc.cwd / "first.err").read_text()
    assert (afc.cwd / "first.rc").read_text().strip() == "1", first_err
    assert "cannot write to the ledger" in first_err
    assert len((afc.cwd / "first-calls.log").read_text().split()) == 16  # 8 calls paid
    spooled = [n for n in (afc.cwd / "spool.ls").read_text().split() if n.endswith(".spool")]
    assert len(spooled) == 8, ((afc.cwd / "spool.ls").read_text(), first_err)
    second_err = (afc.cwd / "second.err").read_text()
    assert (afc.cwd / "second.rc").read_text().strip() == "0", second_err
    rendered = (afc.cwd / "calls.log").read_text().split()[0::2]
    assert len(rendered) == 8, rendered  # none paid for again
    assert len(list((afc.outputs() / "b1").glob("*.png"))) == 8
