"""``--json`` output, apart from ``afc_cli/output.py`` (which imports the run's reporters, and
so pydantic and YAML): a command that only reads figures (``afc queue stats --json``) prints
them without those imports."""

from __future__ import annotations

import errno
import json
import sys
from typing import Any

from afc_cli.secrets import scrub, scrub_data


def emit_json(value: Any) -> None:
    """``value`` as JSON on stdout, scrubbed twice: each string before encoding (JSON escapes
    a secret holding a quote, a backslash or a non-ASCII character, which the text scrub would
    no longer recognise) and the encoded text after (keys and shapes split across values)."""
    text = json.dumps(scrub_data(value), indent=2, sort_keys=False)
    sys.stdout.write(scrub(text, decode=False) + "\n")
    sys.stdout.flush()
    lost = getattr(sys.stdout, "lost", None)  # a run's stdout, whose failed write never raises
    if lost is not None and lost.errno != errno.EPIPE:  # a reader gone ('| head') chose to go
        # the run went on, its exit code its jobs'; a script reading the JSON from a file on
        # a full disk finds it empty or cut short, so say so (to stderr, if that still works)
        sys.stderr.write(
            f"afc: the --json result could not be written to stdout ({lost}); what this "
            "command did is recorded in the ledger ('afc status --json' shows the jobs)\n"
        )
