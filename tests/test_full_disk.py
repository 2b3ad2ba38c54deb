"""A full disk where the ledger and the spool live (issue 12), on a small tmpfs mounted in a
private mount namespace (``unshare -rm``; skipped where that is not available): the run stops
with exit 1 and one message, no spooled bytes are lost, and a resume after freeing space
renders nothing twice."""

from __future__ import annotations

import shlex
import shutil
import sqlite3
import subprocess
import sys
from collections import Counter

import pytest
import yaml
from conftest import manifest

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not shutil.which("unshare"), reason="needs unshare (Linux)"
)


@pytest.fixture
def namespace():
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("unprivileged mount namespaces are not available")


def in_namespace(afc, script: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", script],
        cwd=afc.cwd,
        env={**afc.env, "AFC_LOCAL_CALL_LOG": str(afc.cwd / "calls.log")},
        capture_output=True,
        text=True,
        timeout=300,
    )


def write_manifest(afc, n: int) -> None:
    data = manifest([{"key": f"k{i:02d}", "prompt": f"prompt {i}"} for i in range(n)])
    data["defaults"]["params"] = {"size": "1024x1024"}  # about 20 KB each
    (afc.cwd / "manifest.yaml").write_text(yaml.safe_dump(data))


def afc_line(afc, *args: str, min_free: str) -> str:
    command = " ".join(shlex.quote(part) for part in afc.command(*args))
    return f"AFC_MIN_FREE_MB={min_free} {command}"


def calls(afc, name: str = "calls.log") -> Counter:
    path = afc.cwd / name
    lines = path.read_text().split() if path.exists() else []
    return Counter(lines[0::2])  # "<job id> <attempt>" per call


def test_no_render_starts_without_room_for_its_bytes(afc, namespace):
    write_manifest(afc, 10)
    ledger = "disk/afc.db"
    script = "\n".join(
        [
            "set -e",
            "mkdir -p disk && mount -t tmpfs -o size=4m tmpfs disk",
            "head -c 3500000 /dev/zero > disk/filler",  # about 0.5 MiB left
            f"{afc_line(afc, 'submit', 'manifest.yaml', '--ledger', ledger, min_free='1')}"
            " > first.out 2> first.err || echo $? > first.rc",
            "cp calls.log first-calls.log 2>/dev/null || true",
            "rm disk/filler",
            f"{afc_line(afc, 'resume', '--ledger', ledger, '--json', min_free='1')}"
            " > second.out 2> second.err || echo $? > second.rc",
        ]
    )
    result = in_namespace(afc, script)
    assert result.returncode == 0, result.stderr
    first_err = (afc.cwd / "first.err").read_text()
    assert (afc.cwd / "first.rc").read_text().strip() == "1", first_err
    assert "Traceback" not in first_err
    assert "MiB free where rendered bytes are kept" in first_err
    assert "no render was started. Free space, then run 'afc resume'" in first_err
    assert not calls(afc, "first-calls.log")  # nothing paid for that could not be kept
    second_err = (afc.cwd / "second.err").read_text()
    assert not (afc.cwd / "second.rc").exists(), second_err
    assert set(calls(afc).values()) == {1} and len(calls(afc)) == 10
    assert len(list((afc.outputs() / "b1").glob("*.png"))) == 10


def test_a_ledger_disk_that_fills_mid_run_loses_no_spooled_bytes(afc, namespace):
    write_manifest(afc, 40)
    ledger = "disk/afc.db"
    script = "\n".join(
        [
            "mkdir -p disk && mount -t tmpfs -o size=900k tmpfs disk || exit 9",
            f"{afc_line(afc, 'submit', 'manifest.yaml', '--ledger', ledger, min_free='0')}"
            " > first.out 2> first.err; echo $? > first.rc",
            "ls disk/afc.db-spool > spool.ls 2>/dev/null",
            "cp calls.log first-calls.log 2>/dev/null",
            "mount -o remount,size=50m disk || exit 9",
            f"{afc_line(afc, 'resume', '--ledger', ledger, min_free='1')}"
            " > second.out 2> second.err; echo $? > second.rc",
            "cp disk/afc.db ledger-copy.db; cp disk/afc.db-wal ledger-copy.db-wal 2>/dev/null",
            "exit 0",
        ]
    )
    result = in_namespace(afc, script)
    assert result.returncode == 0, result.stderr
    first_err = (afc.cwd / "first.err").read_text()
    assert "Traceback" not in first_err
    assert (afc.cwd / "first.rc").read_text().strip() == "1", first_err
    assert "cannot write to the ledger" in first_err
    assert "database or disk is full" in first_err
    assert "afc resume" in first_err.strip().splitlines()[-1]
    spooled = {
        name.split(".")[0]
        for name in (afc.cwd / "spool.ls").read_text().split()
        if name.endswith(".spool")
    }
    second_err = (afc.cwd / "second.err").read_text()
    assert (afc.cwd / "second.rc").read_text().strip() == "0", second_err
    rendered = calls(afc)
    assert len(rendered) == 40
    # every output that reached the spool before the disk filled is stored from it, not
    # rendered again; a render is repeated only if its bytes never reached the spool
    assert all(rendered[job_id] == 1 for job_id in spooled), (spooled, rendered)
    assert len(list((afc.outputs() / "b1").glob("*.png"))) == 40


def test_a_spool_write_that_fails_leaves_no_partial_file(tmp_path, monkeypatch):
    """A write cut short (ENOSPC here) removes its ``.part`` file: a partial file is never
    adopted, so keeping it would only hold disk space that the next render needs."""
    import errno

    from afc_cli import spool as spool_mod

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    spool = spool_mod.Spool(tmp_path / "ledger.db-spool")
    monkeypatch.setattr(spool_mod.os, "write", full)
    with pytest.raises(OSError):
        spool.write("job1", b"x" * 1024)
    assert list(spool.root.iterdir()) == []
    assert spool.job_ids() == set()


def test_a_ledger_locked_by_another_process_is_not_blamed_on_the_disk():
    """Found by an outside audit: a sqlite3 shell holding the write lock past the busy timeout
    stopped the run with 'fix the disk or file system'."""
    import sqlite3

    from afc_cli.errors import ledger_write_error

    locked = str(ledger_write_error("afc.db", sqlite3.OperationalError("database is locked")))
    assert "another process held the ledger's write lock" in locked
    assert "disk" not in locked
    full = str(ledger_write_error("afc.db", sqlite3.OperationalError("database or disk is full")))
    assert "free space on its disk" in full


def test_a_runs_first_wave_is_counted_at_the_batchs_stored_outputs(afc, namespace):
    """A run knew no output's size until it had spooled one: its first ``--concurrency``
    calls were held to the margin alone. A cron'd resume on a spool disk nearly full (120 KiB
    above a 50 KiB margin) started sixteen renders of 20 KB; the bytes of those past the room
    were paid for and lost, and rendered again (paid twice). It now counts them at the
    largest output its batches already stored, and starts only those that fit."""
    data = manifest([{"key": f"k{i:02d}", "prompt": f"prompt {i}"} for i in range(17)])
    data["defaults"]["params"] = {"size": "1024x1024", "latency_s": 0.3}  # ~20 KB each
    first = dict(data, jobs=data["jobs"][:1])
    (afc.cwd / "first.yaml").write_text(yaml.safe_dump(first))
    (afc.cwd / "manifest.yaml").write_text(yaml.safe_dump(data))
    script = "\n".join(
        [
            f"{afc_line(afc, 'submit', 'first.yaml', min_free='0')} 2> zero.err || exit 8",
            "mkdir -p afc.db-spool && mount -t tmpfs -o size=1m tmpfs afc.db-spool || exit 9",
            # about 170 KiB left: the 50 KiB margin and room for six outputs, not sixteen
            "free=$(df -k --output=avail afc.db-spool | tail -1)",
            "head -c $(( (free - 170) * 1024 )) /dev/zero > afc.db-spool/filler",
            f"{afc_line(afc, 'submit', 'manifest.yaml', '--concurrency', '16', min_free='0.05')}"
            " > first.out 2> first.err; echo $? > first.rc",
            "cp calls.log first-calls.log",
            "rm afc.db-spool/filler",
            f"{afc_line(afc, 'resume', min_free='0.05')} > second.out 2> second.err;"
            " echo $? > second.rc",
            "exit 0",
        ]
    )
    result = in_namespace(afc, script)
    assert result.returncode == 0, (result.stderr, (afc.cwd / "zero.err").read_text())
    first_err = (afc.cwd / "first.err").read_text()
    assert "Traceback" not in first_err
    assert (afc.cwd / "first.rc").read_text().strip() == "1", first_err
    assert "the renders in flight and this one may bring" in first_err
    assert 1 < len(calls(afc, "first-calls.log")) < 16
    second_err = (afc.cwd / "second.err").read_text()
    assert (afc.cwd / "second.rc").read_text().strip() == "0", second_err
    rendered = calls(afc)
    assert len(rendered) == 17 and set(rendered.values()) == {1}, rendered  # none paid twice


def test_a_render_being_stored_is_not_counted_again_at_the_next_ones_disk_check(afc, s3, namespace):
    """A synchronous provider's render held the room its disk check counted (``landing``)
    until its job ended: through its spool write, where it is counted among the renders not
    yet spooled, and through its store, its bytes already on the disk. With one upload slow
    (held here), the next render, on a disk with room for it (about 30 KiB above the margin
    for a 20 KB output), waited 'disk nearly full' and the run ended with exit 1."""
    import threading
    import time

    from s3fake import Fault

    data = manifest([{"key": f"k{i:02d}", "prompt": f"prompt {i}"} for i in range(2)])
    data["defaults"]["params"] = {"size": "1024x1024"}  # about 20 KB each
    (afc.cwd / "manifest.yaml").write_text(yaml.safe_dump(data))
    s3.plan.add(Fault("PUT", r"/k00\.png", "stall", 1))  # k00's upload, until released

    def release() -> None:
        # once k01 has either been sent to its provider or been made to wait
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                waiting = afc.rows("SELECT 1 FROM jobs WHERE key = 'k01' AND status = 'waiting'")
            except sqlite3.Error:
                waiting = []
            if calls(afc).total() >= 2 or waiting:
                break
            time.sleep(0.05)
        s3.plan.release()

    watcher = threading.Thread(target=release)
    watcher.start()
    submit = afc_line(
        afc, "submit", "manifest.yaml", "--storage", s3.url, "--concurrency", "1", min_free="0.05"
    )
    script = "\n".join(
        [
            "mkdir -p afc.db-spool && mount -t tmpfs -o size=1m tmpfs afc.db-spool || exit 9",
            # about 105 KiB left: the 50 KiB margin and room for two outputs
            "free=$(df -k --output=avail afc.db-spool | tail -1)",
            "head -c $(( (free - 105) * 1024 )) /dev/zero > afc.db-spool/filler",
            f"{submit} > first.out 2> first.err; echo $? > first.rc",
            "exit 0",
        ]
    )
    result = in_namespace(afc, script)
    watcher.join()
    assert result.returncode == 0, result.stderr
    err = (afc.cwd / "first.err").read_text()
    assert "Traceback" not in err
    assert "MiB free where rendered bytes are kept" not in err, err
    assert (afc.cwd / "first.rc").read_text().strip() == "0", err
    assert sorted(afc.rows("SELECT key, status FROM jobs")) == [
        ("k00", "succeeded"),
        ("k01", "succeeded"),
    ]
    assert set(calls(afc).values()) == {1}


def test_a_workers_batch_met_by_a_refill_is_counted_at_its_stored_outputs(afc, namespace):
    """A run counts its first wave at the largest output its batches already stored
    (``Ledger.largest_output``), read for the batches of its start alone: a worker's loop
    met a batch admitted since (``run._open_batches``) knowing no size for it, and on a
    spool disk with room for about five 20 KB renders it started all fifteen its slots
    allowed, their bytes past the room paid for and lost. The batch is counted at its stored
    outputs as the loop meets it: no more start than fit."""
    import time

    def write(name: str, batch: str, keys: list[str], size: str) -> None:
        data = manifest([{"key": key, "prompt": f"{batch} {key}"} for key in keys], batch=batch)
        data["defaults"]["params"] = {"size": size}
        (afc.cwd / name).write_text(yaml.safe_dump(data))

    write("first.yaml", "big", ["k00"], "1024x1024")  # about 20 KB, stored before
    write("small.yaml", "small", ["s0"], "48x32")
    write("big.yaml", "big", [f"k{i:02d}" for i in range(17)], "1024x1024")
    release, stop = afc.cwd / "release", afc.cwd / "stop"
    worker = afc_line(
        afc, "worker", "--poll", "0.1", "--concurrency", "16", "--claim", "16", min_free="0.05"
    )
    script = "\n".join(
        [
            f"{afc_line(afc, 'submit', 'first.yaml', min_free='0')} 2> first.err || exit 8",
            "mkdir -p afc.db-spool && mount -t tmpfs -o size=1m tmpfs afc.db-spool || exit 9",
            # about 160 KiB left: the 50 KiB margin and room for five outputs
            "free=$(df -k --output=avail afc.db-spool | tail -1)",
            "head -c $(( (free - 160) * 1024 )) /dev/zero > afc.db-spool/filler",
            f"{afc_line(afc, 'submit', 'small.yaml', '--no-run', min_free='0')} || exit 7",
            f"AFC_LOCAL_RELEASE={release} {worker} > worker.out 2> worker.err &",
            "pid=$!",
            f"while [ ! -e {stop} ]; do sleep 0.05; done",
            "kill -TERM $pid; wait $pid",
            "exit 0",
        ]
    )
    env = {**afc.env, "AFC_LOCAL_CALL_LOG": str(afc.cwd / "calls.log")}
    proc = subprocess.Popen(
        ["unshare", "-rm", "sh", "-c", script],
        cwd=afc.cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def big_calls() -> int:
        ids = {row[0] for row in afc.rows("SELECT id FROM jobs WHERE batch = 'big'")}
        return sum(1 for job_id in calls(afc) if job_id in ids)

    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(calls(afc)) < 2:  # k00, then s0 held
            time.sleep(0.05)
        assert len(calls(afc)) == 2, proc.poll()
        admitted = subprocess.run(
            afc.command("submit", "big.yaml", "--no-run"),
            cwd=afc.cwd,
            env=env,
            capture_output=True,
            text=True,
        )
        assert admitted.returncode == 0, admitted.stderr
        # the worker's refill claims the batch: each of its jobs starts or waits for room
        while time.monotonic() < deadline:
            waiting = afc.rows(
                "SELECT COUNT(*) FROM jobs WHERE batch = 'big' AND status = 'waiting'"
            )[0][0]
            if big_calls() + waiting >= 15:
                break
            time.sleep(0.05)
        started = big_calls() - 1  # (k00's call was the first submit's)
    finally:
        release.touch()
        stop.touch()
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    said = (afc.cwd / "worker.err").read_text()
    assert "Traceback" not in said
    assert 1 <= started <= 5, (started, said)
