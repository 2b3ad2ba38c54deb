"""stdout and stderr that a run outlives, and no death by SIGPIPE while it runs.

``afc`` puts SIGPIPE back to its default at start (cli.main) so that ``afc status | head`` ends
quietly. For a command that pays for calls or posts webhooks, that default is a hazard twice
over, since it kills the whole process on the spot, every call in flight left ``started``
(possibly paid, rendered and paid again by the next run):

- a socket's peer that closes while afc still sends (a provider answering a large upload
  early and hanging up, a storage endpoint or a receiver doing the same) sends SIGPIPE to the
  writer: the run died with exit 141 and no message, where the call should have failed as
  one ``unavailable`` attempt;
- the reader of its output going away (``afc submit ... 2>&1 | head -3``) did the same on
  the next progress line; and with SIGPIPE ignored, the write raised ``BrokenPipeError`` in
  a job's task instead, or EIO when the terminal hung up, which broke the run as badly.

``guard()`` (the run commands call it first) ignores SIGPIPE, so a socket's closed peer is an
error the provider adapter classifies, and wraps ``sys.stdout`` and ``sys.stderr`` so that a
write that fails drops that stream's output from then on (its descriptor is pointed at
``/dev/null``, so nothing flushed later fails either) and never raises: progress lines and the
summary are for a person, the ledger is the record. A closed pipe (EPIPE) is also told to the
run loop (``watch``): the reader is gone, as SIGPIPE meant, so the run stops as at a first
signal (run.py's ``Interruption``: no new call, the calls in flight recorded and stored, exit
130). Any other failed write (EIO: a terminal that hung up without a SIGHUP reaching afc, say
a run left in the background after a logout) stops nothing: the run goes on without output.

A write that *blocks* is the other hazard. A pipe nobody reads (``afc worker 2>&1 | less``
left on its first page, a script's unread ``stderr=PIPE``: 64 KiB is about 2,600 "ended"
lines), a terminal paused with Ctrl-S or a stalled ssh session stops the writer in
``write()``. The run loop writes its progress lines on its own thread, inside the group
commit's open transaction (the ledger's ``grouped``): the run stopped with its jobs' rows
locked, and every other afc process that needed them ('afc cancel', 'afc retry', a review
decision, another worker) failed after the ledger's lock timeout. So while a run's loop
runs (``detached()``, run.py's ``run_jobs``) each guarded stream's writes go to a backlog
that a thread of its own writes out: a write never waits. What the backlog cannot hold
(``BACKLOG_BYTES``) is dropped, and counted in one line written when the reader is back
("afc: 1,204 lines of output were dropped ..."): progress is for a person, the ledger is the
record. At the loop's end the backlog is written out before anything else is, the ledger's
transactions all ended: a run whose reader never comes back waits there, holding nothing.
A pipe whose reader has gone is still seen at the line written (its write end polls POLLERR),
not when the writer thread meets it: the loop would have started more calls meanwhile.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import stat
import sys
import threading
from collections.abc import Callable
from typing import Any

_watchers: list[Callable[[], None]] = []
_pipe_closed = False
# What a detached stream keeps for a reader that is not reading, before it drops output: 15
# minutes of a live panel's redraws, thousands of progress lines
BACKLOG_BYTES = 1 << 20
# How long the writer waits for more lines before it writes what it has
GATHER_S = 0.05


class Guarded:
    """A text stream whose failed write drops its output rather than raising."""

    def __init__(self, stream: Any):
        self._stream = stream
        self.lost: OSError | None = None
        self._backlog: _Backlog | None = None  # while detached

    def write(self, text: str) -> int:
        backlog = self._backlog
        if backlog is not None:
            backlog.put(text)
        elif self.lost is None:
            try:
                return self._stream.write(text)
            except OSError as exc:
                self._lose(exc)
        return len(text)

    def flush(self) -> None:
        # detached: its writer flushes what it writes
        if self.lost is None and self._backlog is None:
            try:
                self._stream.flush()
            except OSError as exc:
                self._lose(exc)

    def _lose(self, exc: OSError) -> None:
        global _pipe_closed
        self.lost = exc
        with contextlib.suppress(OSError, ValueError, AttributeError):
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, self._stream.fileno())
            finally:
                os.close(null)
        if exc.errno == errno.EPIPE:
            _pipe_closed = True
            for callback in list(_watchers):
                # a loop that closed as the reader went (its watch not yet removed)
                with contextlib.suppress(RuntimeError):
                    callback()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _Backlog:
    """A detached stream's writes, queued for its writer thread (module docstring)."""

    def __init__(self, guarded: Guarded, limit: int):
        self.guarded, self.limit = guarded, limit
        self.queued: list[str] = []
        self.size = 0
        self.dropped = 0  # lines dropped since the writer last took the queue
        self.closing = False
        self.ready = threading.Condition()
        self.pipe = _pipe_poll(guarded)
        self.thread = threading.Thread(target=self._write_out, name="afc-output", daemon=True)
        self.thread.start()

    def put(self, text: str) -> None:
        with self.ready:
            if self.guarded._backlog is not self:  # detached() ended as this write began
                self._write(text)
                return
            if self.guarded.lost is not None:
                return
            if self.pipe is not None and any(e & select.POLLERR for _, e in self.pipe.poll(0)):
                # its reader went away: acted on at this line, as the write itself was
                # (``_lose``: the run stops as at a first signal), not once the writer meets
                # it, the loop having started more calls meanwhile
                self.guarded._lose(BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE)))
                return
            # once full, everything is dropped until the writer takes the queue: what gets
            # through comes after the line that says what was dropped
            if self.queued and (self.dropped or self.size + len(text) > self.limit):
                self.dropped += text.count("\n") or 1
                return
            if not self.queued:
                self.ready.notify()
            self.queued.append(text)
            self.size += len(text)

    def close(self) -> None:
        """Write out what is queued (this waits for the reader), then stop the writer; a
        write from another thread meanwhile goes out after it."""
        with self.ready:
            self.closing = True
            self.ready.notify()
        self.thread.join()  # the writer ends by attaching the stream again (``_write_out``)
        with self.ready:
            self.guarded._backlog = None  # (a writer that died of an error did not)

    def _write_out(self) -> None:
        while True:
            with self.ready:
                while not self.queued and not self.dropped and not self.closing:
                    self.ready.wait()
                if not self.closing:
                    # the lines that follow, written out together: one wake of this thread
                    # (and one write) for a burst of them, not one each
                    self.ready.wait(GATHER_S)
                if not self.queued and not self.dropped:
                    # closing, and all written: the stream attached again under the lock
                    # that put() takes, so a write from another thread from now on goes
                    # straight out (``put``); set once this thread had returned, one that
                    # came between was queued for no writer and lost
                    self.guarded._backlog = None
                    return
                text, dropped = "".join(self.queued), self.dropped
                self.queued, self.size, self.dropped = [], 0, 0
            if dropped:
                text += (
                    f"afc: {dropped:,} line{'s' if dropped != 1 else ''} of output "
                    f"{'were' if dropped != 1 else 'was'} dropped: it was not being read "
                    "(a paused terminal, a full pipe); the ledger has every job's state\n"
                )
            self._write(text)

    def _write(self, text: str) -> None:
        guarded = self.guarded
        if guarded.lost is None:
            try:
                guarded._stream.write(text)
                guarded._stream.flush()
            except OSError as exc:
                guarded._lose(exc)


def guard() -> None:
    """SIGPIPE ignored, stdout and stderr wrapped (see the module docstring)."""
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, Guarded):
            setattr(sys, name, Guarded(stream))


def _pipe_poll(guarded: Guarded) -> Any:
    """A poll of the stream's descriptor when it is a pipe (whose write end reports POLLERR
    once its reader has gone), else None."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        fd = guarded._stream.fileno()
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            poll = select.poll()
            poll.register(fd, select.POLLOUT)
            return poll
    return None


@contextlib.contextmanager
def detached(limit: int = BACKLOG_BYTES):
    """While the block runs, writes to the guarded stdout and stderr never wait for their
    reader (module docstring); at its end, what they queued is written out first."""
    backlogs = []
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, Guarded) and stream._backlog is None:
            stream._backlog = _Backlog(stream, limit)
            backlogs.append(stream)
    try:
        yield
    finally:
        for stream in backlogs:
            stream._backlog.close()


# Where ``say`` writes: a line for the person at the command from code that has no reporter
# (the ledger waiting on another afc, ``PostgresLedger._hold_walk``). The command line's
# boundary sets it (cli.py ``_boundary``); a library caller is told nothing.
say_to: Callable[[str], None] | None = None


def say(message: str) -> None:
    """Tell the person at the command ``message`` (``say_to``), if there is one."""
    if say_to is not None:
        say_to(message)


def pipe_closed() -> bool:
    """Whether a guarded stream's reader went away (EPIPE) already."""
    return _pipe_closed


@contextlib.contextmanager
def watch(callback: Callable[[], None]):
    """``callback()`` (from any thread) when a guarded stream's reader goes away, while the
    block runs."""
    _watchers.append(callback)
    try:
        yield
    finally:
        _watchers.remove(callback)
