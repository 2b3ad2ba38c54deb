"""Local file work (spool writes, file:// stores, read-backs, directory fsyncs) in a helper
process, so it runs on another core without taking the run loop's GIL.

Why a process and not threads: a fresh run of many quick jobs is bound by two things, the run
loop's Python and SQLite work and the file system's syscalls (two fsyncs, a dozen other calls
per job). In threads of one process every syscall hands the GIL back and forth between the
file thread and the run loop, and those hand-offs cost more than the work itself: measured on a
2-core machine, a 10,000-job run took as long with file work in threads as with all of it done
inline. In a helper process the two halves run side by side; the run loop keeps no thread of
its own and speaks to the helper through two pipes from the event loop.

Why not ``concurrent.futures.ProcessPoolExecutor``: it runs one call per worker process at a
time (a worker waiting in fsync holds its process) and drives its queues with two threads in
the calling process, which brings back the GIL hand-offs this module exists to avoid.

The helper runs each call on a small thread pool (fsyncs overlap; stats and small reads have
threads of their own), is started by ``afc submit``/``afc resume`` before they import the run
and ended after it, ignores Ctrl-C, SIGTERM and SIGHUP (the run loop decides what an interruption
means) and, on Linux, dies with its parent: a SIGKILLed run leaves no helper finishing its file
work behind it. Every
call it makes is one the pipeline already treats as interruptible at any instant (fsync +
rename into the spool, create-only stores), so a crash on either side of the pipe is a crash
like any other; and a helper that dies alone under a live run (killed by an OOM killer or a
person) is not one: its outstanding calls are made again, and every later one made, in threads
of the run's process (``FileWorker._without_helper``), so no rendered output handed to it is
lost.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
import types
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from afc_cli.errors import STOP_SIGNALS, SpoolError

# call id, length of the pickled call that follows, lane, length of its pickled callable (the
# call's first bytes; its arguments follow)
REQUEST = struct.Struct("!QIBI")
REPLY = struct.Struct("!QI")  # call id, length of the pickled outcome that follows
THREADS = 8  # for fsyncs and writes: they overlap well (a disk takes several at once)
QUICK_THREADS = 2  # for stats and small reads, which must not queue behind fsyncs


class HelperGone(SpoolError):
    """The helper process ended while calls were outstanding (it was killed, say). A
    ``FileWorker`` then makes them in this process instead (``_without_helper``)."""

    def __init__(self, message: str = "the file helper process (afc_cli.offload) ended"):
        super().__init__(message + "; nothing is lost that the ledger recorded: run 'afc resume'")


_early: subprocess.Popen | None = None


def prestart() -> None:
    """Start the helper now, before a run's imports and admission, so that it has booted by
    the time the first job needs it (the first provider calls wait for its first answer).
    One no run took (a submit with nothing to run, or refused) is ended at exit: it holds
    nothing, and left to the garbage collector it was a ResourceWarning ('subprocess is
    still running') under ``python -X dev``."""
    global _early
    if _early is None:
        import atexit

        _early = _spawn()
        atexit.register(_end_unused)


def _end_unused() -> None:
    global _early
    if _early is not None:
        proc, _early = _early, None
        proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


def _spawn() -> subprocess.Popen:
    # its file work needs no key, token or password: it is given none of the environment's
    from afc_cli.secrets import environment_without_secrets

    return subprocess.Popen(
        [sys.executable, "-m", "afc_cli.offload"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=environment_without_secrets(),
    )


class FileWorker:
    """Parent side: ``await worker.call(fn, *args, **kwargs)`` runs ``fn`` in the helper.

    ``fn`` and its arguments must pickle (module-level functions, bound methods of picklable
    objects); its result or exception comes back pickled."""

    def __init__(self, notice: Callable[[str], None] = lambda message: None) -> None:
        self.notice = notice  # told once if the helper ends under the run (``_without_helper``)
        self._told = False
        self._closing = False
        self._proc: subprocess.Popen | None = None
        self._pipe: asyncio.WriteTransport | None = None
        self._pending: dict[int, asyncio.Future] = {}
        self._ids = itertools.count()
        self._reader: asyncio.Task | None = None
        self._out: list[bytes] = []  # calls made in this turn of the loop, not yet sent
        self._callables: dict[Any, tuple[Any, bytes]] = {}  # see ``_pickled_callable``

    async def start(self) -> None:
        global _early
        self._proc, _early = (_early or _spawn()), None
        assert self._proc.stdin is not None and self._proc.stdout is not None
        loop = asyncio.get_running_loop()
        stdout = asyncio.StreamReader()
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(stdout), self._proc.stdout
        )
        self._pipe, _ = await loop.connect_write_pipe(asyncio.Protocol, self._proc.stdin)
        self._reader = asyncio.create_task(self._read(stdout))

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await self._call(0, fn, args, kwargs)

    async def quick(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A call that only looks (a stat, a small read): it runs on threads of its own, so a
        probe that holds a render slot never waits behind other jobs' fsyncs."""
        return await self._call(1, fn, args, kwargs)

    async def _call(self, lane: int, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        assert self._pipe is not None
        if self._reader is None or self._reader.done() or self._pipe.is_closing():
            return await self._without_helper(fn, args, kwargs)
        call_id = next(self._ids)
        head = self._pickled_callable(fn)
        frame = pickle.dumps((args, kwargs), pickle.HIGHEST_PROTOCOL)
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._pending[call_id] = future
        if not self._out:
            loop.call_soon(self._send)
        self._out += (REQUEST.pack(call_id, len(head) + len(frame), lane, len(head)), head + frame)
        try:
            return await future
        except HelperGone:  # it died with this call outstanding: the call is made again here
            if self._closing:  # killed by ``close``: the run is over
                raise
            return await self._without_helper(fn, args, kwargs)

    async def _without_helper(self, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """The helper ended under a live run (killed alone: an OOM killer, a person's
        ``kill``): its calls, and every later one, run in threads of this process. A rendered
        output handed to it was otherwise lost (HelperGone stopped the run as a broken disk:
        the paid render made again by the next run) though the disk was sound. Making a call
        again is safe: each is one the pipeline treats as interruptible at any instant (a
        spool write starts its ``.part`` afresh, a create-only store that landed finds its
        own object, a read or fsync is idempotent), and the dead helper runs none of them."""
        if not self._told:
            self._told = True
            code = self._proc.poll() if self._proc is not None else None
            self.notice(
                f"the file helper process (afc_cli.offload, pid "
                f"{self._proc.pid if self._proc else '?'}) ended"
                + (f" (exit {code})" if code is not None else "")
                + "; its file work goes on in this process: nothing is lost"
            )
        return await asyncio.to_thread(fn, *args, **kwargs)

    def _pickled_callable(self, fn: Callable[..., Any]) -> bytes:
        """``fn`` pickled, once per function or per bound method of an object that says its
        state does not change (``offload_stable``: a run's storage and spool). A bound method
        pickles its whole object each time (measured: 15-20 us of the run loop's time, five
        calls a job); the helper keeps what it unpickled by these bytes, too. The object is
        held here, so its id cannot be reused by another while the worker lives. Anything
        else (a ``functools.partial``, a method of another object) is pickled per call, and
        never kept: it may carry state that changes, or be made anew for each call."""
        owner = getattr(fn, "__self__", None)
        if isinstance(owner, types.ModuleType) or (
            owner is None and isinstance(fn, types.FunctionType)
        ):
            key: Any = fn  # a module-level function: pickled by name
        elif owner is not None and getattr(owner, "offload_stable", False):
            key = (id(owner), fn.__func__)
        else:
            return pickle.dumps(fn, pickle.HIGHEST_PROTOCOL)
        found = self._callables.get(key)
        if found is None:
            found = self._callables[key] = (owner, pickle.dumps(fn, pickle.HIGHEST_PROTOCOL))
        return found[1]

    def _send(self) -> None:
        """Send the calls made in one turn of the loop with one write: a write to the pipe
        wakes the helper, and at hundreds of jobs in flight one per call measured a third of
        a millisecond each, on the run loop's core."""
        out, self._out = self._out, []
        if out and self._pipe is not None and not self._pipe.is_closing():
            self._pipe.writelines(out)

    async def _read(self, stdout: asyncio.StreamReader) -> None:
        try:
            while True:
                call_id, size = REPLY.unpack(await stdout.readexactly(REPLY.size))
                ok, value = pickle.loads(await stdout.readexactly(size))
                future = self._pending.pop(call_id, None)
                if future is None or future.done():
                    continue
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(HelperGone())
            self._pending.clear()

    async def close(self, timeout: float | None = None) -> None:
        """Let the helper finish what it was given, then end it.

        ``timeout``: how long that may take. The run's jobs have all ended by now, so a call
        still outstanding is one whose job was cancelled (a stopping run) and whose result
        nobody waits for; one that never returns (a hung network mount, a FIFO put where a
        spool file was: an open that waits for a writer) held the run past its grace and its
        exit forever, deaf to the first signal. After ``timeout`` the helper is killed: each
        of its calls is one the pipeline treats as interruptible at any instant."""
        if self._proc is None:
            return
        self._closing = True
        self._send()
        if self._pipe is not None and not self._pipe.is_closing():
            self._pipe.close()  # end of input: the helper finishes its calls and exits
        ended = asyncio.ensure_future(self._ended())
        done, _ = await asyncio.wait({ended}, timeout=timeout)
        if not done:
            self._proc.kill()
            self.notice(
                f"the file helper process (afc_cli.offload, pid {self._proc.pid}) had file work "
                f"left {timeout:g}s after the run ended (a hung disk or network mount?): it was "
                "stopped; every job stays resumable"
            )
        await ended

    async def _ended(self) -> None:
        if self._reader is not None:
            await self._reader
        await asyncio.get_running_loop().run_in_executor(None, self._proc.wait)


def _die_with_parent() -> None:
    """Linux: be sent SIGKILL when the process that started us ends (PR_SET_PDEATHSIG)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return


def _reply(call_id: int, ok: bool, value: Any) -> bytes:
    try:
        frame = pickle.dumps((ok, value), pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # an unpicklable result or exception: say what it was
        frame = pickle.dumps((False, RuntimeError(f"{value!r} ({exc})")))
    return REPLY.pack(call_id, len(frame)) + frame


def serve(inp: Any, out: Any) -> None:
    """Helper side: read calls from ``inp`` until it closes, run them, write replies."""
    lock = threading.Lock()
    callables: dict[bytes, Any] = {}  # by their pickled bytes (``FileWorker._pickled_callable``)

    def run(call_id: int, frame: bytes, split: int) -> None:
        try:
            head = frame[:split]
            fn = callables.get(head)
            if fn is None:
                fn = pickle.loads(head)
                owner = getattr(fn, "__self__", None)
                stable = owner is None or getattr(owner, "offload_stable", False)
                if stable and len(callables) < 1024:  # else a fresh copy each call, as sent
                    callables[head] = fn
            args, kwargs = pickle.loads(frame[split:])
            reply = _reply(call_id, True, fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the caller
            reply = _reply(call_id, False, exc)
        with lock:
            out.write(reply)
            out.flush()

    # The modules whose calls come here, imported before the threads that load those calls:
    # on Python before 3.15 (CPython gh-83065) one thread loading a call of
    # afc_cli.storage.base (its module lock taken first) while another loaded the package
    # afc_cli.storage (whose __init__ imports that module) raised _DeadlockError from the
    # import system, and the run stopped ('unexpected error', exit 1)
    import afc_cli.spool  # noqa: F401
    import afc_cli.storage.file  # noqa: F401

    parent = os.getppid()
    pool, quick = ThreadPoolExecutor(THREADS), ThreadPoolExecutor(QUICK_THREADS)
    while True:
        header = inp.read(REQUEST.size)
        if len(header) < REQUEST.size:
            break
        call_id, size, lane, split = REQUEST.unpack(header)
        (quick if lane else pool).submit(run, call_id, inp.read(size), split)
    # End of input. From a live run (it ended, or was interrupted and waits for us before it
    # releases its jobs): finish every call. From a dead one (where PR_SET_PDEATHSIG is not
    # available; we were handed to another parent): drop the calls not yet started rather
    # than write spool files or objects behind the next run's back.
    orphaned = os.getppid() != parent
    for executor in (pool, quick):
        executor.shutdown(wait=True, cancel_futures=orphaned)


def main() -> None:
    _die_with_parent()
    for signum in STOP_SIGNALS:  # the run loop decides what they mean (a hangup reaches us too)
        signal.signal(signum, signal.SIG_IGN)
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr  # nothing but replies goes to the pipe
    try:
        serve(sys.stdin.buffer, out)
    finally:
        # closed once every call is done: left to the interpreter's exit, a run in development
        # mode (PYTHONDEVMODE=1, which reaches us) ended with 'ResourceWarning: unclosed file'.
        # A reply the parent no longer reads (it went first) is no error of ours to print.
        try:
            out.close()
        except OSError:
            pass


if __name__ == "__main__":
    main()
