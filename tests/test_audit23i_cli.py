"""Outside audit 23i: the command-line contract (streams, exit codes, messages) as a user meets
it through the real ``afc`` command."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest
from conftest import manifest


def _shell(afc, line: str) -> subprocess.CompletedProcess:
    """``afc`` run by a shell line, so that its streams can be closed as a crontab closes them."""
    command = shlex.join(afc.command())
    return subprocess.run(
        ["sh", "-c", line.replace("AFC", command)],
        cwd=afc.cwd,
        env=afc.env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_run_whose_stderr_or_stdout_is_closed_runs_and_drops_that_output(afc):
    """A crontab line 'afc resume 2>&-' (stderr closed, not redirected) exited 1 having run
    nothing and said nothing (Python leaves sys.stderr None, and afc's first message failed),
    night after night; with stdout closed, 'afc status --json' said 'unexpected error ... (a
    bug in afc)'. A closed stream is now /dev/null: the command runs, that output is dropped."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}, {"key": "b", "prompt": "q"}]))
    done = _shell(afc, "AFC submit manifest.yaml 2>&-")
    assert done.returncode == 0, done
    assert afc.rows("SELECT key, status FROM jobs ORDER BY key") == [
        ("a", "succeeded"),
        ("b", "succeeded"),
    ]

    # both closed: the run's JSON goes nowhere, and the run is not taken for a failure
    afc.write_manifest(manifest([{"key": "c", "prompt": "r"}], batch="b2"))
    done = _shell(afc, "AFC submit manifest.yaml --json >&- 2>&-")
    assert done.returncode == 0, done
    assert afc.rows("SELECT status FROM jobs WHERE key = 'c'") == [("succeeded",)]

    # a read command with stdout closed ends 0, no 'bug in afc'
    for line in ("AFC status --json >&-", "AFC costs report >&-", "AFC outputs >&-"):
        read = _shell(afc, line)
        assert read.returncode == 0 and read.stderr == "", (line, read)

    # and stdout still holds the JSON when only stderr is closed
    shown = _shell(afc, "AFC status --json 2>&-")
    assert shown.returncode == 0, shown
    assert len(json.loads(shown.stdout)["jobs"]) == 3


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_output_that_cannot_be_written_is_one_line_and_no_advice_to_resume(afc):
    """'afc status --json > status.json' on a full disk said '[Errno 28] No space left on
    device; every job stays resumable: fix it, then run 'afc resume'' (a command that reads,
    and changed nothing: resume is no fix, and runs every unfinished job), and 'afc --help' or
    '--version' written there printed a traceback. Each is one line now, exit 1."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    assert afc("submit", "manifest.yaml").returncode == 0
    for line in ("AFC status --json", "AFC costs report --csv", "AFC queue stats"):
        read = _shell(afc, line + " > /dev/full")
        assert read.returncode == 1, (line, read)
        assert "No space left on device" in read.stderr, (line, read.stderr)
        assert "afc resume" not in read.stderr and "bug in afc" not in read.stderr, read.stderr
        assert "run it again: " + line.replace("AFC", "afc") in read.stderr, read.stderr
    for line in ("AFC --help", "AFC --version", "AFC status -h"):
        told = _shell(afc, line + " > /dev/full")
        assert told.returncode == 1, (line, told)
        assert "Traceback" not in told.stderr and len(told.stderr.splitlines()) == 1, told.stderr
        assert "No space left on device" in told.stderr, told.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_run_s_json_lost_to_a_full_disk_is_said_on_stderr(afc):
    """'afc submit shots.yaml --json > run.json' (the help's own example) on a full disk ran,
    exited 0 and said nothing: run.json empty, and the script reading it met no JSON with no
    word why. The run still goes on and exits as its jobs did; stderr now says the JSON was
    lost and where the run is recorded."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    for line in ("AFC submit manifest.yaml --json", "AFC resume --json"):
        done = _shell(afc, line + " > /dev/full")
        assert done.returncode == 0, (line, done)
        assert "the --json result could not be written to stdout" in done.stderr, done.stderr
        assert "No space left on device" in done.stderr, done.stderr
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]


def test_readme_names_the_api_key_variable_of_every_provider():
    """README's providers table named OPENAI_API_KEY and '...': a user of Replicate, fal or
    Gemini found no word of REPLICATE_API_TOKEN, FAL_KEY or GEMINI_API_KEY in it (only the
    exit-2 message of a run, or the examples' comments, told the name)."""
    from afc_cli.providers import PROVIDERS

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    for name, provider in PROVIDERS.items():
        key_env = getattr(provider, "key_env", None)
        if key_env:
            assert f"`{name}` (`{key_env}`)" in readme, (name, key_env)


def test_the_outputs_help_example_for_the_paths_gives_the_paths_with_several_batches(afc):
    """'afc outputs -h' showed 'afc outputs | cut -f2  # the paths (or URLs), one a line'
    (README too), which holds for a ledger of one batch only: with a second batch the pipe's
    rows gain a 'batch' column first, and the same line printed the keys, and before them the
    header's name. A script written on the first day fed keys to its copy the day a second
    film was admitted. The example, run as the help writes it, gives the paths alone."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}], batch="trailer-shots"))
    assert afc("submit", "manifest.yaml").returncode == 0
    afc.write_manifest(manifest([{"key": "a", "prompt": "q"}], batch="teaser"))
    assert afc("submit", "manifest.yaml").returncode == 0

    help_text = afc("outputs", "-h").stdout
    [example] = [line.strip() for line in help_text.splitlines() if "cut -f" in line]
    line = example.split("#")[0].strip().replace("afc ", "AFC ", 1)
    paths = _shell(afc, line)
    assert paths.returncode == 0, paths
    expected = afc.outputs() / "trailer-shots" / "a.png"
    assert paths.stdout.splitlines() == [str(expected)], (example, paths.stdout)
