"""A submit that renders, in Python's development mode, says nothing of unclosed files.

Development mode (``PYTHONDEVMODE=1``, as a developer or a CI job sets it to see
ResourceWarnings) reaches afc's file helper (afc_cli/offload.py) through the environment. The
helper wrote its replies to a copy of its stdout that it never closed: every run that used it
ended with 'ResourceWarning: unclosed file <_io.BufferedWriter name=3>' and a line of its source
on afc's stderr, on Python 3.11, 3.12 and 3.13 alike. The helper closes it once its calls are
done.
"""

from __future__ import annotations

import subprocess
import sys

from conftest import manifest


def test_a_rendering_submit_in_development_mode_warns_of_no_unclosed_file(afc):
    afc.write_manifest(manifest([{"key": f"k{i}", "prompt": f"p{i}"} for i in range(3)]))
    run = subprocess.run(
        [sys.executable, "-m", "afc_cli", "submit", "manifest.yaml", "-q"],
        cwd=afc.cwd,
        env={**afc.env, "PYTHONDEVMODE": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)] * 3
    assert "Warning:" not in run.stderr, run.stderr
