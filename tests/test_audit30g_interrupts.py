"""Outside audit 30g (interruptions of the commands other than a plain submit): real ``afc``
child processes stopped by real signals between their reads and their writes."""

from __future__ import annotations

import signal
import sqlite3

from conftest import manifest, wait_for
from test_audit25a_cancel import MODEL, RATES, _cut_off


def _frame_and_shot(afc) -> None:
    """'frame' rendering on Replicate (its submit stopped), 'shot' blocked behind it."""
    data = manifest(
        [
            {"key": "frame", "prompt": "hold frame"},
            {"key": "shot", "prompt": "a shot", "needs": ["frame"]},
        ],
        rates=RATES,
    )
    data["defaults"]["chain"] = [{"provider": "replicate", "model": MODEL}]
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml")
    wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE provider_request_id IS NOT NULL", 1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 130, proc.stderr.read()


def _jobs(afc) -> list[tuple]:
    return afc.rows("SELECT key, status, error_code FROM jobs ORDER BY key")


def test_a_cancel_cut_off_while_it_asks_the_provider_fails_the_jobs_that_need_it(afc, fake):
    """'afc cancel KEY' interrupted while it asked Replicate to stop the job's render had
    cancelled the job but failed the jobs that need it only at the very end, after every
    provider was asked (up to 150 s each): they stayed 'blocked', 'waiting for 1 need:
    frame', a job no run will render, and 'afc queue stats' counted them blocked. Run again
    as told, the cancel found the job already cancelled and failed none of them either."""
    _frame_and_shot(afc)
    err = _cut_off(afc, signal.SIGINT, "frame")
    assert "interrupted" in err and "cancel those again" in err, err
    assert _jobs(afc) == [
        ("frame", "cancelled", "CANCELLED"),
        ("shot", "failed", "DEPENDENCY_FAILED"),
    ]
    again = afc("cancel", "frame")
    assert again.returncode == 0, again.stderr
    assert fake.counts["replicate_submit"] == 1


def test_a_cancel_run_again_fails_the_jobs_a_killed_cancel_left_blocked(afc, fake):
    """A cancel killed (SIGKILL, a power cut) between its job's cancel and its failing the
    jobs that need it: run again as it was, it fails them."""
    _frame_and_shot(afc)
    conn = sqlite3.connect(afc.cwd / "afc.db")
    conn.row_factory = sqlite3.Row
    before = dict(conn.execute("SELECT * FROM jobs WHERE key = 'shot'").fetchone())
    conn.close()
    _cut_off(afc, signal.SIGINT, "frame")
    # the shot as a cancel killed right after its job's cancel left it
    conn = sqlite3.connect(afc.cwd / "afc.db")
    with conn:
        sets = ", ".join(f"{name} = ?" for name in before)
        conn.execute(f"UPDATE jobs SET {sets} WHERE key = 'shot'", tuple(before.values()))
    conn.close()
    assert _jobs(afc)[1] == ("shot", "blocked", None)
    again = afc("cancel", "frame")
    assert again.returncode == 0, again.stderr
    assert "already cancelled" in again.stderr, again.stderr
    assert _jobs(afc) == [
        ("frame", "cancelled", "CANCELLED"),
        ("shot", "failed", "DEPENDENCY_FAILED"),
    ]
