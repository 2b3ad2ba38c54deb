"""An idle worker draining its due webhook events (``worker.drain_while_idle``, in the ledger's
group commit) makes its claims there, and each claim's look for blocked jobs says the jobs it
fails with DEPENDENCY_FAILED (``worker.Settle``). Said while the look's writes waited in the
group's open transaction: with the worker's stderr a pipe nobody read ('afc worker 2>&1 |
less' left on its first page), the worker stopped in ``write()`` holding the ledger's write
lock, and every other afc command failed after the lock timeout, as a run's loop did before
its output was detached (tests/test_unread_output.py)."""

from __future__ import annotations

import base64
import fcntl
import os
import sqlite3
import subprocess
import threading
import time

from conftest import manifest, wait_for
from receiver import Receiver

SECRET = "whsec_" + base64.b64encode(b"afc test secret, 32 bytes long!!").decode()


def _full_pipe() -> tuple[int, int]:
    """A pipe whose buffer is full already: its reader is away."""
    read_end, write_end = os.pipe()
    flags = fcntl.fcntl(write_end, fcntl.F_GETFL)
    fcntl.fcntl(write_end, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    try:
        while True:
            os.write(write_end, b"x" * 4096)
    except BlockingIOError:
        pass
    fcntl.fcntl(write_end, fcntl.F_SETFL, flags)
    return read_end, write_end


def test_an_idle_worker_whose_stderr_nobody_reads_holds_no_lock_as_it_fails_a_dependent(afc):
    receiver = Receiver().start()
    receiver.gate = threading.Event()  # every POST held: the worker stays in its drain
    afc.env["AFC_HOOK_SECRET"] = SECRET
    data = manifest(
        [
            {"key": "style", "prompt": "a style frame", "review": True},
            {"key": "shot", "prompt": "a shot", "needs": ["style"]},
        ]
    )
    data["webhook"] = {"url": "http://127.0.0.1:9/down", "secret_env": "AFC_HOOK_SECRET"}
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    assert afc("review", "reject", "style", "--reason", "too dark").returncode == 0
    with sqlite3.connect(afc.cwd / "afc.db") as conn:  # due now, at the held receiver
        conn.execute("UPDATE deliveries SET url = ?, next_attempt_at = 0", (receiver.url,))

    read_end, write_end = _full_pipe()
    worker = subprocess.Popen(
        afc.command("worker", "--poll", "0.05"),
        cwd=afc.cwd,
        env=afc.env,
        stdout=subprocess.DEVNULL,
        stderr=write_end,
    )
    os.close(write_end)
    read: list[bytes] = []
    try:
        deadline = time.time() + 30
        while not receiver.received:  # its drain's POST is in flight, held
            assert worker.poll() is None and time.time() < deadline
            time.sleep(0.02)
        # the shot retried alone: the worker's next look (a claim in its drain) fails it again
        assert afc("retry", "shot").returncode == 0
        wait_for(afc, "SELECT COUNT(*) FROM jobs WHERE key = 'shot' AND status = 'failed'", 1)
        other = afc.write_manifest(manifest([{"key": "x", "prompt": "x"}], batch="b2"), "o.yaml")
        result = afc("submit", str(other), "--no-run", timeout=60)
        assert result.returncode == 0, result.stderr
    finally:
        receiver.stop()

        def reader() -> None:  # the reader back: what it was told is written out
            while chunk := os.read(read_end, 65536):
                read.append(chunk)

        threading.Thread(target=reader, daemon=True).start()
        worker.terminate()
        try:
            worker.wait(timeout=60)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    assert b"b1/shot: ended failed: DEPENDENCY_FAILED" in b"".join(read)
