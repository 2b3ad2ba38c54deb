"""Outside audit 30g (interruptions of the commands other than a plain submit): real ``afc``
child processes stopped by real signals between their reads and their writes."""

from __future__ import annotations

import signal
import sqlite3

import pytest
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


def _asked_then(afc, command: list[str], then) -> tuple[int, str]:
    """Run 'afc COMMAND' on a terminal, wait for its '[y/N]' question, then ``then(proc,
    master)``: its exit code and what the terminal showed."""
    import os
    import pty
    import select
    import subprocess
    import time

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        afc.command(*command), cwd=afc.cwd, env=afc.env, stdin=slave, stdout=slave, stderr=slave
    )
    os.close(slave)
    said = b""
    deadline = time.time() + 60
    while b"[y/N]" not in said and time.time() < deadline:
        said += os.read(master, 4096)
    # the question is printed before the child reads its answer: a signal that lands in
    # between is handled (its flag set) before the read starts, which then waits for a key
    # (CPython's input() looks at its signals only when a read is interrupted): a test that
    # signals at once hung there, once in a full run. A person who presses Ctrl-C then sees
    # nothing happen and presses it again; the test waits for the read, as a person would
    while not _reading_a_terminal(proc.pid) and time.time() < deadline:
        time.sleep(0.01)
    then(proc, master)
    try:
        while time.time() < deadline + 60:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            chunk = os.read(master, 4096)
            if not chunk:
                break
            said += chunk
    except OSError:  # the child closed the terminal
        pass
    try:
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return code, said.decode(errors="replace")


def _reading_a_terminal(pid: int) -> bool:
    """Whether the process sleeps in a terminal's read (Linux: its kernel stack, else its
    wait channel): it is then waiting for an answer, and a signal interrupts the read."""
    for name in ("stack", "wchan"):
        try:
            with open(f"/proc/{pid}/{name}") as handle:
                text = handle.read()
        except OSError:
            continue
        if "n_tty_read" in text or "wait_woken" in text:
            return True
    return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
@pytest.mark.parametrize(
    "command", [["cancel", "--batch", "b1"], ["retry", "--batch", "b1", "--failed"]]
)
def test_an_interruption_at_the_confirmation_question_is_exit_130(afc, sig, command):
    """Ctrl-C (or SIGTERM, SIGHUP) while 'afc cancel --batch B' or 'afc retry --batch B
    --failed' asked 'cancel these 2 jobs? [y/N]' printed click's 'Aborted!' and exited 1,
    which README's exit codes give to a failed job, not 130, an interruption."""
    data = manifest([{"key": k, "prompt": "p", "params": {"fail": ["invalid"]}} for k in "ab"])
    afc.write_manifest(data)
    before = "queued" if command[0] == "cancel" else "failed"
    assert afc(
        "submit", "manifest.yaml", *(["--no-run"] if before == "queued" else [])
    ).returncode in (0, 1)
    code, said = _asked_then(afc, command, lambda proc, master: proc.send_signal(sig))
    assert code == 130, said
    assert "interrupted" in said and "Aborted!" not in said and "Traceback" not in said, said
    assert afc.rows("SELECT DISTINCT status FROM jobs") == [(before,)]


def test_an_end_of_input_at_the_confirmation_question_declines(afc):
    """Ctrl-D at the question is no answer: declined, nothing changed (exit 2), as 'n'."""
    afc.write_manifest(manifest([{"key": k, "prompt": "p"} for k in "ab"]))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    import os

    code, said = _asked_then(afc, ["cancel", "--batch", "b1"], lambda p, m: os.write(m, b"\x04"))
    assert code == 2, said
    assert "declined; nothing was changed" in said and "Aborted!" not in said, said
    assert afc.rows("SELECT DISTINCT status FROM jobs") == [("queued",)]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_worker_until_idle_stopped_by_a_signal_says_so_in_its_line(afc, sig):
    """'afc worker --until-idle' stopped by a signal while jobs were left exits 130 (README),
    but its summary line read as a worker that had run its batch out ('worker claimed 4 jobs
    in 1 round; 0 finished; spent ...'), not a word of the interruption or of the jobs left:
    a script's log could not tell why it exited 130. It says so now."""
    import time

    jobs = [{"key": f"j{i}", "prompt": "p", "params": {"latency_s": 0.4}} for i in range(4)]
    afc.write_manifest(manifest(jobs))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    proc = afc.popen("worker", "--until-idle", "--concurrency", "1")
    wait_for(afc, "SELECT COUNT(*) FROM attempts", 1)
    time.sleep(0.1)
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == 130
    err = proc.stderr.read()
    assert "interrupted before it went idle: jobs are left to run" in err, err
    assert "Traceback" not in err, err
    left = afc.rows("SELECT COUNT(*) FROM jobs WHERE status = 'queued'")[0][0]
    assert left >= 1, err
    # run again, it finishes them, each paid once
    assert afc("worker", "--until-idle").returncode == 0
    assert afc.rows("SELECT status, COUNT(*) FROM attempts GROUP BY status") == [("succeeded", 4)]
