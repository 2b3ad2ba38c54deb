"""Where ``afc`` (and ``python -m afc_cli``) starts: a stop before the command began.

A stop signal is taken from the first moment, before the command-line layer is imported
(typer, rich: 40 ms on a quiet machine, a quarter of a second on a busy one), not only once
a command installs its handlers (afc_cli/cli.py ``_interrupt_on_sigterm``, afc_cli/run.py's
``Interruption``, afc_cli/worker.py):

- A container's first process (PID 1 of its namespace: ``docker run`` without ``--init``, a
  Kubernetes pod's container) is not killed by a signal it has no handler for: the kernel
  drops it. A SIGTERM (``docker stop``) in that window was lost, and the run went on until
  the SIGKILL ten seconds later, its calls in flight then abandoned, possibly paid.
- A Ctrl-C in that window printed a Python traceback, and a SIGTERM or SIGHUP killed the
  process without a word (exit 143 or 129, codes README does not document).

Each now raises KeyboardInterrupt, as Ctrl-C does, until the command's own handlers replace
these (SIGHUP is left ignored when it came ignored, ``nohup``: afc_cli/errors.py
``STOP_SIGNALS``): before the command began, afc says it was interrupted and that nothing
changed, exit 130; later, the command's boundary says what its interruption left
(afc_cli/cli.py ``_boundary``). Python's own start-up, before this module runs (about 15 ms),
is the window left. tests/test_early_signals.py.
"""

from __future__ import annotations

import signal
import sys


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, _stop)
    try:
        from afc_cli.cli import main as command

        command()
    except KeyboardInterrupt:
        # a command's own interruptions end in its boundary or in cli.main (exit 130): one
        # that reaches here came before the command began
        try:
            sys.stderr.write("afc: interrupted before the command began; nothing was changed\n")
        except (AttributeError, OSError, ValueError):  # no stderr, or a closed one
            pass
        sys.exit(130)


if __name__ == "__main__":
    main()
