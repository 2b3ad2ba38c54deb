"""The file helper process and coalesced directory fsyncs."""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import sqlite3
import time
from pathlib import Path

import pytest
from conftest import manifest

from afc_cli.errors import StorageError
from afc_cli.offload import FileWorker, HelperGone
from afc_cli.spool import DirSync, Spool
from afc_cli.storage.file import FileStorage


def _defined_in_tests_only() -> None:
    """The helper cannot import the tests package: a call of this fails to load there."""


def test_helper_runs_calls_in_another_process_and_returns_errors_whole(tmp_path):
    async def main():
        worker = FileWorker()
        await worker.start()
        try:
            pid = await worker.call(os.getpid)
            spooled = await worker.call(Spool(tmp_path).write, "job1", b"png bytes")
            (tmp_path / "file").write_text("not a directory")
            with pytest.raises(StorageError) as caught:  # raised in the helper, comes back whole
                await worker.call(
                    FileStorage(tmp_path).put_if_absent, "file/x/k.png", spooled.path, {}
                )
            many = await asyncio.gather(*(worker.call(pow, 2, n) for n in range(50)))
            with pytest.raises(ImportError):  # a call the helper cannot even load...
                await worker.call(_defined_in_tests_only)
            assert await worker.call(os.getpid) == pid  # ...does not end the helper
        finally:
            await worker.close()
        return pid, spooled, caught.value, many

    pid, spooled, error, many = asyncio.run(main())
    assert pid != os.getpid()
    assert spooled.path.read_bytes() == b"png bytes" and spooled.size == 9
    assert "not a directory" in error.message.lower() and error.retryable is False
    assert many == [2**n for n in range(50)]


def test_storage_errors_pickle_with_their_retry_facts():
    error = pickle.loads(pickle.dumps(StorageError("slow down", retryable=True, retry_after=3.5)))
    assert (error.message, error.retryable, error.retry_after) == ("slow down", True, 3.5)


def test_calls_go_on_in_this_process_when_the_helper_is_gone():
    """A helper killed alone under a live run: its calls run in this process, told once
    (tests/test_audit_os.py has the whole run)."""

    async def main():
        told = []
        worker = FileWorker(notice=told.append)
        await worker.start()
        assert worker._proc is not None
        worker._proc.kill()
        worker._proc.wait()
        await worker._reader  # the end of its pipe reached the loop
        assert await worker.call(os.getpid) == os.getpid()
        assert await worker.quick(os.getpid) == os.getpid()
        assert len(told) == 1 and "nothing is lost" in told[0]
        await worker.close()

    asyncio.run(main())


def test_directory_fsyncs_are_shared_and_never_start_before_the_entry(tmp_path):
    """Callers waiting together share one fsync; a caller that arrives while an fsync runs
    waits for the next one (its entry may have landed after that fsync started)."""
    started: list[int] = []

    async def main():
        gate = asyncio.Event()

        async def run(fn, directory):
            started.append(len(started))
            await gate.wait()
            gate.clear()
            fn(directory)  # the real fsync_dir

        dirs = DirSync(run)
        first = [asyncio.create_task(dirs.sync(tmp_path)) for _ in range(10)]
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert started == [0]  # ten callers, one fsync under way
        late = [asyncio.create_task(dirs.sync(tmp_path)) for _ in range(5)]
        await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(*first)
        assert not any(t.done() for t in late)  # they need an fsync that began after them
        await asyncio.sleep(0)
        assert started == [0, 1]
        gate.set()
        await asyncio.gather(*late)

    asyncio.run(main())
    assert len(started) == 2


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found.update(int(p) for p in text)
    return found


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_a_killed_run_leaves_no_helper_behind(afc):
    data = manifest([{"key": f"k{i}", "prompt": f"p{i}"} for i in range(40)])
    data["defaults"]["params"] = {"latency_s": 0.2}
    afc.write_manifest(data)
    proc = afc.popen("submit", "manifest.yaml", "--concurrency", "4")
    deadline = time.monotonic() + 30
    helpers: set[int] = set()
    while not helpers and time.monotonic() < deadline:
        time.sleep(0.05)
        helpers = {
            p
            for p in _children(proc.pid)
            if b"afc_cli.offload" in Path(f"/proc/{p}/cmdline").read_bytes()
        }
    assert helpers, "the run never started its file helper"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in helpers) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = [p for p in helpers if _alive(p)]
    assert not alive, f"helper {alive} outlived its run"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_a_quick_look_never_waits_behind_busy_file_work(tmp_path):
    """Every thread of the helper's main lane is stuck (reading FIFOs nobody writes yet); a
    quick call (what a probe makes while it holds a render slot) still answers."""
    from afc_cli.offload import THREADS

    fifos = [tmp_path / f"fifo{i}" for i in range(THREADS + 2)]
    for fifo in fifos:
        os.mkfifo(fifo)

    async def main():
        worker = FileWorker()
        await worker.start()
        try:
            stuck = [asyncio.create_task(worker.call(fifo.read_text)) for fifo in fifos]
            assert await asyncio.wait_for(worker.quick(os.getpid), 10) != os.getpid()
            assert not any(task.done() for task in stuck)
            for fifo in fifos:  # let them go
                await asyncio.to_thread(fifo.write_text, fifo.name)
            return await asyncio.gather(*stuck)
        finally:
            await worker.close()

    assert asyncio.run(main()) == [fifo.name for fifo in fifos]


def test_a_spool_that_cannot_be_written_is_found_before_any_render_is_paid(afc):
    """A spool that refuses files (here its path is a file, as a broken, read-only or
    over-quota disk would refuse them) is found before any render is paid for (the first
    render's bytes would have had nowhere to go): exit 1 with a message and no traceback. A
    submit checks it beside the storage, before admitting: no ledger is written. A resume
    checks it before its first job: no attempt. Once the disk is fixed, every job finishes."""
    afc.write_manifest(manifest([{"key": f"k{i}", "prompt": f"p{i}"} for i in range(3)]))
    (afc.cwd / "afc.db-spool").write_text("in the way")
    result = afc("submit", "manifest.yaml", "--concurrency", "1")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "afc.db-spool cannot be written" in result.stderr
    assert "No render was started" in result.stderr
    assert not (afc.cwd / "afc.db").exists(), "a refused submit writes no ledger"
    (afc.cwd / "afc.db-spool").unlink()
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    (afc.cwd / "afc.db-spool").write_text("in the way")
    result = afc("resume")
    assert result.returncode == 1, result.stderr
    assert "afc.db-spool cannot be written" in result.stderr and "Traceback" not in result.stderr
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(0,)]
    (afc.cwd / "afc.db-spool").unlink()
    result = afc("resume")
    assert result.returncode == 0, result.stderr
    assert afc.rows("SELECT DISTINCT status FROM jobs") == [("succeeded",)]
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(3,)]


def test_a_spool_that_breaks_mid_run_stops_new_calls_and_records_the_ones_in_flight(afc):
    """The spool breaks while two calls are in flight (the folder is swapped for a file, as a
    disk that fails mid-run would refuse writes). k0's output cannot be kept: that stops the
    run as a first signal does. k1's call, still in flight, is not cancelled into an unknown,
    possibly paid attempt: it finishes, and its cost is recorded. No new call starts: k2 took
    k0's slot and may have sent its call before the failure was known (then it is recorded
    the same way), or is stopped before sending it (a known 0) or before its attempt row; k3
    never starts. Exit 1 with the
    spool's message; once the disk is fixed, resume finishes every job."""
    latencies = [1.0, 3.0, 1.0, 1.0]
    afc.write_manifest(
        manifest(
            [
                {"key": f"k{i}", "prompt": f"p{i}", "params": {"latency_s": latency}}
                for i, latency in enumerate(latencies)
            ]
        )
    )
    spool = afc.cwd / "afc.db-spool"
    run = afc.popen("submit", "manifest.yaml", "--concurrency", "2")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if (afc.cwd / "afc.db").exists() and spool.is_dir():
            try:
                started = afc.rows("SELECT COUNT(*) FROM attempts WHERE status = 'started'")
            except sqlite3.OperationalError:  # the ledger is being created: no tables yet
                started = [(0,)]
            if started == [(2,)]:
                break
        time.sleep(0.02)
    else:
        run.kill()
        pytest.fail("the two calls never started")
    spool.rename(afc.cwd / "spool-away")
    spool.write_text("the disk broke")
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == 1, stderr
    assert "Traceback" not in stderr
    assert "cannot keep the output of b1/k0" in stderr
    assert "stopping (a rendered output could not be spooled): no new provider calls" in stderr
    attempts = dict(
        afc.rows(
            "SELECT j.key, a.status || ' ' || COALESCE(a.cost_source, '') || ' '"
            " || COALESCE(a.cost_micros, 'unknown') FROM attempts a JOIN jobs j ON j.id = a.job_id"
        )
    )
    assert attempts["k0"] == attempts["k1"] == "succeeded local 50000", attempts
    assert attempts.get("k2") in (None, "succeeded local 50000", "failed unsent 0"), attempts
    assert attempts.get("k3") in (None, "failed unsent 0"), attempts
    lost = afc.rows("SELECT COUNT(*) FROM events WHERE kind = 'spool_failed'")[0][0]
    assert lost == 2 + (attempts.get("k2") == "succeeded local 50000"), lost
    spool.unlink()
    (afc.cwd / "spool-away").rename(spool)
    result = afc("resume")
    assert result.returncode == 0, result.stderr
    assert afc.rows("SELECT DISTINCT status FROM jobs") == [("succeeded",)]
    assert afc.rows(
        "SELECT COUNT(*) FROM attempts WHERE status NOT IN ('succeeded', 'failed')"
    ) == [(0,)]


def test_a_failed_directory_fsync_reaches_every_caller_and_the_next_one_runs(tmp_path):
    calls = []

    async def run(fn, directory):
        calls.append(directory)
        if len(calls) == 1:
            raise HelperGone()
        fn(directory)

    async def main():
        dirs = DirSync(run)
        first = await asyncio.gather(
            *(dirs.sync(tmp_path) for _ in range(3)), return_exceptions=True
        )
        await dirs.sync(tmp_path)  # a later caller gets a fresh fsync, not a hang
        return first

    first = asyncio.run(asyncio.wait_for(main(), 10))
    assert all(isinstance(e, HelperGone) for e in first) and len(calls) == 2


def test_a_failed_fsync_whose_callers_were_all_cancelled_is_not_reported_as_unread(tmp_path):
    """A stopping run cancels the jobs waiting on a directory fsync; asyncio.shield then stops
    listening to the shared fsync. If that fsync fails afterwards (the helper was closed:
    HelperGone), nobody reads its error, and asyncio printed "Future exception was never
    retrieved" with a traceback on the user's terminal (seen in tests/test_full_disk.py)."""
    import gc

    unread = []
    release = asyncio.Event()

    async def run(fn, directory):
        await release.wait()
        raise HelperGone()

    async def main():
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda loop, context: unread.append(context["message"]))
        dirs = DirSync(run)
        waiting = [asyncio.create_task(dirs.sync(tmp_path)) for _ in range(2)]
        await asyncio.sleep(0)
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        release.set()
        for _ in range(5):
            await asyncio.sleep(0)
        gc.collect()
        await asyncio.sleep(0)

    asyncio.run(asyncio.wait_for(main(), 10))
    assert unread == []


def test_a_helper_started_early_and_never_used_is_ended_at_exit(afc):
    """``afc submit`` starts its file helper before it knows whether any job runs; a submit
    with nothing to run (a replay) left it to the garbage collector: 'ResourceWarning:
    subprocess ... is still running' and two unclosed pipes under ``python -X dev``."""
    import subprocess
    import sys

    afc.write_manifest(manifest([{"key": "k", "prompt": "p"}]))
    assert afc("submit", "manifest.yaml", "-q").returncode == 0
    again = subprocess.run(
        [sys.executable, "-X", "dev", "-m", "afc_cli", "submit", "manifest.yaml", "-q"],
        cwd=afc.cwd,
        env=afc.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0, again.stderr
    assert "ResourceWarning" not in again.stderr, again.stderr


def test_helper_imports_the_storage_modules_before_its_threads_load_calls():
    """Loaded by two of the helper's threads at once, a call of afc_cli.storage.base and one
    of the package afc_cli.storage (whose __init__ imports that module) took their module
    locks in opposite orders: Python before 3.15 raised _DeadlockError (CPython gh-83065),
    and a worker stopped with 'unexpected error' (chaos-postgres seed 64). The helper imports
    them first, in its main thread; and a storage's check during a run is a method of the
    storage, which the helper loads without importing the pipeline."""

    async def main():
        worker = FileWorker()
        await worker.start()
        try:
            loaded = await worker.call(
                eval,
                "sorted(m for m in __import__('sys').modules if m.startswith('afc_cli'))",
            )
            assert {"afc_cli.storage", "afc_cli.storage.base", "afc_cli.storage.file"} <= set(
                loaded
            )
            assert "afc_cli.spool" in loaded
            await worker.call(FileStorage(Path(os.getcwd())).check_again)
            after = await worker.call(eval, "'afc_cli.pipeline' in __import__('sys').modules")
            assert after is False
        finally:
            await worker.close()

    asyncio.run(main())
