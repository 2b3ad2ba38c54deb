"""``--json`` output, apart from ``afc_cli/output.py`` (which imports the run's reporters, and
so pydantic and YAML): a command that only reads figures (``afc queue stats --json``) prints
them without those imports."""

from __future__ import annotations

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
