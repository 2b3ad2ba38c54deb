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
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

_watchers: list[Callable[[], None]] = []
_pipe_closed = False


class Guarded:
    """A text stream whose failed write drops its output rather than raising."""

    def __init__(self, stream: Any):
        self._stream = stream
        self.lost: OSError | None = None

    def write(self, text: str) -> int:
        if self.lost is None:
            try:
                return self._stream.write(text)
            except OSError as exc:
                self._lose(exc)
        return len(text)

    def flush(self) -> None:
        if self.lost is None:
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
                callback()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def guard() -> None:
    """SIGPIPE ignored, stdout and stderr wrapped (see the module docstring)."""
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, Guarded):
            setattr(sys, name, Guarded(stream))


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
