"""Outside audit 30b (the maintainer's known item 'a woken worker whose job another host
finished also says "ended succeeded", so the workers' summaries count that job twice'): a
worker stopped (SIGSTOP: a laptop's lid, a VM paused) past its lease while its provider call
was in flight wakes to find its job taken over and ended by another host. It said 'ended
succeeded' for it and counted it among the jobs it finished (--json 'finished', and 'failed'
with --until-idle's exit 1 for a job the other host failed), so the two workers' summaries
added up to two jobs for one. It says another process ended the job, and counts it as
neither finished nor failed."""

from __future__ import annotations

import json
import signal
import subprocess

import pytest
from conftest import jobs, manifest, wait_for_ledger


def _worker(afc, url: str, host: str, release) -> subprocess.Popen:
    env = {"AFC_LEASE_S": "3", "AFC_LOCAL_RELEASE": str(release), "AFC_HOST_ID": host}
    if url:
        env["AFC_LEDGER"] = url
    return afc.popen(
        "worker", "--until-idle", "--poll", "0.1", "--json", env=env, stdout=subprocess.PIPE
    )


@pytest.mark.parametrize("ended", ["succeeded", "failed"])
def test_a_woken_worker_does_not_count_a_job_another_host_ended(afc, ledger_url, ended):
    url = ledger_url if ledger_url.startswith("postgresql") else ""
    params = {} if ended == "succeeded" else {"fail": ["invalid", "invalid"]}
    afc.write_manifest(manifest(jobs(1, **params)))
    env = {"AFC_LEDGER": url} if url else {}
    assert afc("submit", "manifest.yaml", "--no-run", env=env).returncode == 0
    release_a, release_b = afc.cwd / "release-a", afc.cwd / "release-b"
    release_b.touch()  # host-b's calls answer at once; host-a's is held until it is woken
    stalled = _worker(afc, url, "host-a", release_a)
    try:
        wait_for_ledger(afc, url, "SELECT COUNT(*) FROM attempts", proc=stalled)
        stalled.send_signal(signal.SIGSTOP)
        # its lease run out (as 3 s of the pause would have it), without waiting for it
        _sql(afc, url, "UPDATE jobs SET lease_expires = 0")
        other = _worker(afc, url, "host-b", release_b)
        out_b, err_b = other.communicate(timeout=60)
        assert _sql(afc, url, "SELECT status FROM jobs") == [(ended,)], err_b
        release_a.touch()
    finally:
        stalled.send_signal(signal.SIGCONT)
    out_a, err_a = stalled.communicate(timeout=60)
    b, a = json.loads(out_b), json.loads(out_a)
    assert (b["finished"], b["failed"]) == (1, 1 if ended == "failed" else 0), err_b
    assert (a["finished"], a["failed"]) == (0, 0), err_a
    assert a["exit_code"] == 0 and stalled.returncode == 0, err_a
    assert f"ended {ended}" not in err_a, err_a
    assert "b1/shot-001: ended here: taken over by another afc process" in err_a, err_a


def _sql(afc, url: str, sql: str) -> list[tuple]:
    if not url:
        import sqlite3

        conn = sqlite3.connect(afc.cwd / "afc.db")
        try:
            rows = conn.execute(sql).fetchall()
            conn.commit()
            return rows
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(sql)
        return cursor.fetchall() if cursor.description else []
