"""Outside audit 54b (cancellation between paying and recording): the signals a run gets
while the ledger's commit sync never ends (its disk hung)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from conftest import manifest

RATES = [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}]


def _opening_a_fifo(pid: int) -> bool:
    """Whether a thread of ``pid`` waits to open a FIFO (Linux: its wait channel)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if "partner" in (task / "wchan").read_text():  # wait_for_partner: a FIFO's open
                return True
        except OSError:
            continue
    return False


def test_a_third_signal_exits_while_the_ledgers_sync_hangs(afc, fake):
    """The run acts on a signal once the WAL sync in flight has ended (the jobs whose rows
    that commit made visible go on to their calls first). A sync that never ends (here the
    WAL's path a FIFO that no one writes to, as an open or fsync that hangs on a dead NFS
    server or a failing disk) left 'afc submit' deaf to every signal: Ctrl-C three times did
    nothing, and only a SIGKILL ended it. The third now exits at once (130), as README says;
    the ledger is as of its last commit, and nothing is lost: 'b', whose row waited for that
    sync, was never sent, and the next run renders it, paying once."""
    data = manifest([{"key": "a", "prompt": "slow-1s a"}, {"key": "b", "prompt": "b"}], rates=RATES)
    data["defaults"]["chain"] = [{"provider": "openai", "model": "gpt-image-1"}]
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml", "--concurrency", "1")
    try:
        deadline = time.time() + 30
        while fake.counts["openai"] < 1 and time.time() < deadline:
            time.sleep(0.01)
        # while 'a' renders, the WAL's path becomes a FIFO: the commit sync of 'b''s attempt
        # row (the next synced commit) waits in its open for ever
        wal = afc.cwd / "afc.db-wal"
        os.rename(wal, afc.cwd / "afc.db-wal.kept")
        os.mkfifo(wal)
        deadline = time.time() + 30
        while not _opening_a_fifo(proc.pid) and time.time() < deadline:
            time.sleep(0.02)
        assert _opening_a_fifo(proc.pid), "the sync never began"
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # three, none merged
            proc.send_signal(sig)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 130
    os.remove(wal)
    os.rename(afc.cwd / "afc.db-wal.kept", wal)
    assert fake.counts["openai"] == 1  # 'b' was never sent
    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert afc.rows("SELECT key, status FROM jobs ORDER BY key") == [
        ("a", "succeeded"),
        ("b", "succeeded"),
    ]
    assert fake.counts["openai_billed"] == 2  # each paid once
