"""A run whose output nobody reads holds nothing in the ledger (afc_cli/streams.py's
``detached``): its progress lines are written by a thread of their own while its loop runs.

Before, the loop wrote each line itself inside the group commit's open transaction: once
the pipe was full (64 KiB: ``afc worker 2>&1 | less`` left on its first page, a script's
unread ``stderr=PIPE``) or the terminal paused (Ctrl-S), the run stopped there with its jobs'
rows locked, and every other afc process that wrote the ledger failed after its lock timeout.
"""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import threading
import time

from conftest import jobs, ledger_count, manifest, wait_for, wait_for_ledger

from afc_cli import streams

JOBS = 1000  # '-v': five lines a job, about 200 KB; a pipe holds 64 KiB


def _other_write_succeeds(afc) -> None:
    """Another afc process writes the ledger (admits a batch) while the run waits for its
    reader: on SQLite a write needs the one write lock, which an open transaction holds."""
    other = afc.write_manifest(manifest(jobs(1), batch="b2"), "other.yaml")
    result = afc("submit", str(other), "--no-run", timeout=60)
    assert result.returncode == 0, result.stderr


def _on_a_pty(afc, command: list[str]) -> tuple[subprocess.Popen, int]:
    """``command`` started with its stderr on a terminal (a pty) that nobody reads yet, and
    that terminal's other side."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        command,
        cwd=afc.cwd,
        env={**afc.env, "TERM": "xterm", "COLUMNS": "100"},
        stdout=subprocess.DEVNULL,
        stderr=follower,
    )
    os.close(follower)
    return proc, leader


def _reading(leader: int, read: list[bytes]) -> threading.Thread:
    """A thread that reads a pty's other side into ``read`` until it closes: the reader
    back."""

    def reader() -> None:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                return
            if not chunk:
                return
            read.append(chunk)

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    return thread


def test_a_run_whose_stderr_pipe_nobody_reads_ends_its_jobs_and_holds_nothing(afc):
    path = afc.write_manifest(manifest(jobs(JOBS)))
    proc = subprocess.Popen(
        afc.command("submit", str(path), "-v"),
        cwd=afc.cwd,
        env=afc.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # nobody reads its stderr yet: every job still ends
        wait_for(afc, "SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'", JOBS, timeout=90)
        _other_write_succeeds(afc)
        assert proc.poll() is None  # it waits for its reader, at the end, holding nothing
        err = proc.communicate(timeout=60)[1]
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-2000:]
    # every line written out once the reader came, in order, none dropped
    ended = [line for line in err.splitlines() if line.endswith(": ended succeeded")]
    assert len(ended) == JOBS
    assert "dropped" not in err


def test_a_worker_whose_output_pipe_nobody_reads_ends_its_jobs_and_holds_nothing(afc, ledger_url):
    """'afc worker 2>&1 | less' left on its first page, on either engine."""
    path = afc.write_manifest(manifest(jobs(JOBS)))
    admitted = afc("submit", str(path), "--no-run", "--ledger", ledger_url)
    assert admitted.returncode == 0, admitted.stderr
    proc = subprocess.Popen(
        afc.command("worker", "--until-idle", "-v", "--ledger", ledger_url),
        cwd=afc.cwd,
        env=afc.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for_ledger(
            afc,
            ledger_url,
            f"SELECT COUNT(*) = {JOBS} FROM jobs WHERE status = 'succeeded'",
            timeout=90,
        )
        other = afc.write_manifest(manifest(jobs(1), batch="b2"), "other.yaml")
        result = afc("submit", str(other), "--no-run", "--ledger", ledger_url, timeout=60)
        assert result.returncode == 0, result.stderr
        out = proc.communicate(timeout=60)[0]
    finally:
        proc.kill()
    assert proc.returncode == 0, out[-2000:]
    # (it may have run the other batch's job too)
    ended = [line for line in out.splitlines() if line.endswith(": ended succeeded")]
    assert sum(line.startswith("afc: b1/") for line in ended) == JOBS
    assert ledger_count(afc, ledger_url, "SELECT COUNT(*) FROM jobs") == JOBS + 1


def test_a_run_on_a_paused_terminal_ends_its_jobs_and_holds_nothing(afc):
    """A terminal nobody reads (a pty whose other side is not read; as Ctrl-S) blocks rich's
    live panel and its lines above it, as a full pipe blocks plain lines."""
    path = afc.write_manifest(manifest(jobs(JOBS)))
    proc, leader = _on_a_pty(afc, afc.command("submit", str(path), "-v"))
    read: list[bytes] = []
    try:
        wait_for(afc, "SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'", JOBS, timeout=90)
        _other_write_succeeds(afc)
        assert proc.poll() is None
        _reading(leader, read)
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        os.close(leader)
    assert b"ended succeeded" in b"".join(read)


class _Blocking:
    """A text stream whose writes wait until ``release`` is set (a reader away)."""

    def __init__(self):
        self.release = threading.Event()
        self.written: list[str] = []

    def write(self, text):
        self.release.wait()
        self.written.append(text)
        return len(text)

    def flush(self):
        pass


def test_a_detached_stream_never_waits_and_says_what_it_dropped(monkeypatch):
    stream = _Blocking()
    guarded = streams.Guarded(stream)
    monkeypatch.setattr("sys.stderr", guarded)
    monkeypatch.setattr("sys.stdout", streams.Guarded(_Blocking()))
    lines = [f"line {i:04d}\n" for i in range(1000)]  # 10 bytes each
    with streams.detached(limit=2000):
        started = time.monotonic()
        for line in lines:
            guarded.write(line)
            guarded.flush()
        took = time.monotonic() - started
        # the writer holds the first line, the backlog the next 200; the rest is dropped
        stream.release.set()
        # detached() ends by writing out what it holds
    assert took < 5  # never waited for the reader (who never came while it wrote)
    text = "".join(stream.written)
    kept = [line for line in text.splitlines(keepends=True) if line.startswith("line ")]
    assert kept == sorted(kept) and len(set(kept)) == len(kept)  # in order, each once
    assert kept[0] == lines[0]
    said = re.findall(r"afc: ([\d,]+) lines of output were dropped: it was not being read", text)
    assert said  # the backlog held 200 lines at a time
    assert len(kept) + sum(int(n.replace(",", "")) for n in said) == len(lines)
    # once the block ended, writes go straight out again
    guarded.write("after\n")
    assert stream.written[-1] == "after\n"


class _Stream:
    def __init__(self):
        self.written: list[str] = []

    def write(self, text):
        self.written.append(text)
        return len(text)

    def flush(self):
        pass


def test_a_write_as_a_detached_stream_closes_is_written_not_lost(monkeypatch):
    """A write from another thread while ``detached()`` ends (a storage thread the run left
    behind logging a warning) goes out after the backlog, as ``_Backlog.close`` says: one
    made once the writer thread had written all and ended, before the stream was attached
    again, was queued for no writer and lost."""
    stream = _Stream()
    guarded = streams.Guarded(stream)
    monkeypatch.setattr("sys.stderr", guarded)
    monkeypatch.setattr("sys.stdout", streams.Guarded(_Stream()))
    with streams.detached():
        guarded.write("progress\n")
        backlog = guarded._backlog
        joined = backlog.thread.join

        def join_then_a_write_comes():
            joined()  # the writer has written all and ended
            guarded.write("a late warning\n")  # another thread's, at this moment

        monkeypatch.setattr(backlog.thread, "join", join_then_a_write_comes)
    assert "".join(stream.written) == "progress\na late warning\n"


def test_a_live_panel_whose_redraws_were_dropped_ends_drawn_and_gives_the_cursor_back(afc):
    """On a terminal paused for minutes (Ctrl-S, a stalled ssh session) the live panel's
    redraws fill the backlog and what follows is dropped, the panel's end with it: its last
    state, and the escape that shows the cursor again, which the panel hid at its start. The
    terminal was left with no cursor (until a 'reset'), under a panel minutes old ("0/300
    ... queued 300") above a summary of 300 succeeded. The panel ends once the backlog is
    written out. The backlog is made small here (a few redraws) for a short run to fill it."""
    count = 300
    path = afc.write_manifest(manifest(jobs(count)))
    small = (
        "import sys; sys.argv[0] = 'afc'; from afc_cli import streams; "
        "streams.detached.__wrapped__.__defaults__ = (3000,); "
        "from afc_cli.__main__ import main; main()"
    )
    proc, leader = _on_a_pty(afc, [sys.executable, "-c", small, "submit", str(path), "-v"])
    read: list[bytes] = []
    try:
        wait_for(afc, "SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'", count, timeout=90)
        thread = _reading(leader, read)
        assert proc.wait(timeout=60) == 0
        thread.join(timeout=10)
    finally:
        proc.kill()
        os.close(leader)
    out = b"".join(read)
    assert b"lines of output were dropped" in out  # the backlog was full
    hidden = out.rindex(b"\x1b[?25l")
    assert b"\x1b[?25h" in out[hidden:]  # the cursor shown again
    assert f"{count}/{count}".encode() in out  # the panel's last state
