"""Outside audit 30h (a review of audit 30b's 'a worker woken past its lease does not count a
job another host took over and ended'): the woken worker knows the job was taken from it by
its takeover event (``Ledger.taken_from_here``), but any such event of the job's history
counted, however old. A long-running worker whose job another host once took over from it (a
laptop's lid closed at night; that host failed the job) and that holds the job again later
(a person's 'afc retry' in the morning, the worker's next claim), whose call a person then
cancels, said 'ended here: taken over by another afc process, which ended it (cancelled)':
no process took it over this time, and no run counted the cancelled job it held (README: a
job a person cancelled while a run held it is that run's to count)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time

from conftest import jobs, manifest, wait_for_ledger


def test_a_takeover_before_this_hold_does_not_make_a_cancel_another_hosts(afc):
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    release = afc.cwd / "release"
    worker = subprocess.Popen(
        afc.command("worker", "--until-idle", "--poll", "0.1", "--json"),
        cwd=afc.cwd,
        env={**afc.env, "AFC_LOCAL_RELEASE": str(release)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_ledger(afc, "", "SELECT COUNT(*) FROM attempts", proc=worker)
        conn = sqlite3.connect(afc.cwd / "afc.db")
        with conn:
            job_id, batch, owner = conn.execute(
                "SELECT id, batch, lease_owner FROM jobs"
            ).fetchone()
            # the job's history: taken over from this worker by another host hours ago (that
            # host then failed it, and a person retried it), the event its takeover wrote
            conn.execute(
                "INSERT INTO events (job_id, batch, at, kind, detail_json)"
                " VALUES (?, ?, ?, 'takeover', ?)",
                (job_id, batch, time.time() - 3600, json.dumps({"previous_owner": owner})),
            )
        conn.close()
        assert afc("cancel", "shot-001").returncode == 0
        release.touch()
        out, err = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    result = json.loads(out)
    assert "taken over by another afc process" not in err, err
    assert "b1/shot-001: ended cancelled" in err, err
    assert (result["finished"], result["failed"]) == (1, 1), result
    # a job that ended cancelled in its hands, as any run's cancelled job counts (exit 1)
    assert result["exit_code"] == 1 and worker.returncode == 1, err
