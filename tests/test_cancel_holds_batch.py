"""'afc cancel --batch B' beside a run holds the batch's jobs first (outside audit 43c's
report). It cancels them one transaction each (20,000 in 10 to 40 s), and a run or a worker
claimed the jobs just ahead of it and paid for their renders meanwhile: 978 of 20,000 beside
an instant resume, 599 beside a worker, each then cancelled with its render paid. The
cancel now leases every free target to itself in one transaction before the first: a run
started while it goes (here: while it is frozen right after the hold) pays for none. A
cancel killed there leaves nothing stuck: this host's next run takes the jobs at once."""

from __future__ import annotations

import signal
import time

from conftest import jobs, manifest


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "T"


def _held_cancel(afc, ledger_url):
    afc.write_manifest(manifest(jobs(6)))
    assert afc("submit", "manifest.yaml", "--no-run", "--ledger", ledger_url).returncode == 0
    cancel = afc.popen(
        "cancel", "--batch", "b1", "--yes", "--ledger", ledger_url,
        env={"AFC_STALL_POINT": "cancel_held"},
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not _stopped(cancel.pid):
        assert cancel.poll() is None, cancel.stderr.read()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return cancel


def test_a_run_beside_a_batch_cancel_pays_for_none_of_its_jobs(afc, ledger_url):
    calls = afc.cwd / "calls.log"
    cancel = _held_cancel(afc, ledger_url)
    try:
        afc("resume", "--ledger", ledger_url, env={"AFC_LOCAL_CALL_LOG": str(calls)})
        assert not calls.exists() or calls.read_text() == "", calls.read_text()
    finally:
        cancel.send_signal(signal.SIGCONT)
        _, err = cancel.communicate(timeout=60)
    assert cancel.returncode == 0, err
    shown = afc.json("status", "--all", "--ledger", ledger_url)["jobs"]
    assert [job["status"] for job in shown] == ["cancelled"] * 6
    assert all(job["cost"] == "0.000000" for job in shown), shown


def test_a_batch_cancel_killed_after_its_hold_leaves_no_job_stuck(afc, ledger_url):
    calls = afc.cwd / "calls.log"
    cancel = _held_cancel(afc, ledger_url)
    cancel.kill()
    cancel.communicate(timeout=60)
    ran = afc("resume", "--ledger", ledger_url, env={"AFC_LOCAL_CALL_LOG": str(calls)})
    assert ran.returncode == 0, ran.stderr
    assert len(calls.read_text().splitlines()) == 6
