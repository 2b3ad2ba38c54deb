"""Run the real ``afc`` command on a pseudo-terminal of a given width, as a person sees it.

``on_pty`` gives the child a pty (stdout, and stderr unless ``stderr_pipe``) sized with
TIOCSWINSZ and ``COLUMNS`` set to the same width, reads everything it writes, and returns the
text with colour and cursor escapes removed (``raw`` keeps them); ``no_color`` sets
``NO_COLOR``. ``on_pipe`` runs the same command with stdout on
a pipe, as ``afc status | grep`` would.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import struct
import subprocess
import termios
from dataclasses import dataclass

ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


@dataclass
class Screen:
    returncode: int
    output: str  # what the terminal showed (stdout, and stderr unless piped apart)
    stderr: str = ""
    raw: str = ""  # what the child wrote to the terminal, escapes and all

    @property
    def lines(self) -> list[str]:
        return self.output.splitlines()


def plain(text: str) -> str:
    return ESCAPES.sub("", text)


def on_pty(
    command: list[str],
    *,
    cwd,
    env: dict[str, str],
    columns: int = 80,
    rows: int = 40,
    stderr_pipe: bool = False,
    timeout: float = 120,
    no_color: bool = False,
) -> Screen:
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {**env, "COLUMNS": str(columns), "LINES": str(rows), "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    if no_color:  # no-color.org: set and not empty
        env["NO_COLOR"] = "1"
    proc = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdin=slave,
        stdout=slave,
        stderr=subprocess.PIPE if stderr_pipe else slave,
        close_fds=True,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError as exc:  # EIO: the child closed the terminal
            if exc.errno != errno.EIO:
                raise
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    err = proc.stderr.read().decode() if stderr_pipe else ""
    returncode = proc.wait(timeout=timeout)
    raw = b"".join(chunks).decode("utf-8", "replace")
    return Screen(returncode, plain(raw), err, raw)


def on_pipe(
    command: list[str], *, cwd, env: dict[str, str], columns: int = 80
) -> subprocess.CompletedProcess:
    env = {**env, "COLUMNS": str(columns), "TERM": "xterm-256color"}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
