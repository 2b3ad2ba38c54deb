"""Outside audit 40a: a stop signal while typer builds and reads the command line, after the
command-line layer was imported and before the command began (afc_cli/cli.py ``main``), is
said as one before it is (afc_cli/__main__.py): typer turned the KeyboardInterrupt into exit
130 without a word, a third of the start-up window tests/test_early_signals.py covers."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import jobs, manifest

# afc's entry point, run as the console script runs it, with a signal sent to itself the
# moment typer builds the command from the app (argv[1]: the signal's name)
AT_PARSE = """
import os, signal, sys
import typer.main

SENT = getattr(signal, sys.argv[1])
build = typer.main.get_command

def signalled(app):
    os.kill(os.getpid(), SENT)
    return build(app)

typer.main.get_command = signalled
sys.argv = ["afc", *sys.argv[2:]]
from afc_cli.__main__ import main
main()
"""


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_stop_as_typer_reads_the_command_line_is_said(afc, signame):
    afc.write_manifest(manifest(jobs(1)))
    result = subprocess.run(
        [sys.executable, "-c", AT_PARSE, signame, "submit", "manifest.yaml"],
        cwd=afc.cwd,
        env=afc.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 130, (result.returncode, result.stderr)
    assert result.stderr == "afc: interrupted before the command began; nothing was changed\n"
    assert not (afc.cwd / "afc.db").exists()


def test_a_command_interrupted_in_its_boundary_says_its_own_line_only(afc):
    """A command's own interruption (exit 130 from its boundary) is not said again."""
    afc.write_manifest(manifest(jobs(1)))
    script = AT_PARSE.replace("import typer.main", "import afc_cli.run, typer.main").replace(
        "typer.main.get_command = signalled",
        "afc_cli.run.submit = lambda *a, **k: os.kill(os.getpid(), signal.SIGINT) or 1 / 0",
    )
    result = subprocess.run(
        [sys.executable, "-c", script, "SIGTERM", "submit", "manifest.yaml"],
        cwd=afc.cwd,
        env=afc.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 130, (result.returncode, result.stderr)
    assert "before the command began" not in result.stderr, result.stderr
    assert result.stderr.startswith("afc: interrupted; nothing is lost"), result.stderr
