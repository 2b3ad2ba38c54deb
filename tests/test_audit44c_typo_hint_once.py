"""Outside audit 44c: an unknown key in ``needs`` or a ``job`` input is refused with a "did
you mean", looked for once per unknown key, not once per job naming it. A typo in the
defaults' needs, or in every line a script wrote (``needs: ["stlye"]``), was looked up among
every key of the manifest (difflib) for each job, and a 5,000-line list took 38 s to be
refused (0.6 s now; 10,000 lines, four times as long). Counted as the look-ups an ``afc
plan`` makes, never as a time."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import manifest

LINES = 300


def _counted(cwd, *args: str) -> tuple[subprocess.CompletedProcess, int]:
    """``afc ARGS`` in a child process, and how many "did you mean" look-ups it made."""
    code = (
        "import atexit, sys\n"
        "import afc_cli.manifest as m\n"
        "calls = [0]\n"
        "mean = m.did_you_mean\n"
        "def counted(name, choices):\n"
        "    calls[0] += 1\n"
        "    return mean(name, choices)\n"
        "m.did_you_mean = counted\n"
        "atexit.register(lambda: sys.stderr.write(f'\\nLOOKUPS {calls[0]}\\n'))\n"
        f"sys.argv = ['afc', *{list(args)!r}]\n"
        "from afc_cli.cli import main\n"
        "main()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=600
    )
    line = [x for x in result.stderr.splitlines() if x.startswith("LOOKUPS ")][-1]
    return result, int(line.split()[1])


def test_a_mistyped_need_on_every_line_is_looked_up_once(afc):
    top = manifest([{"key": "style", "prompt": "s"}], jobs_from="shots.jsonl")
    afc.write_manifest(top)
    (afc.cwd / "shots.jsonl").write_text(
        "".join(
            json.dumps({"key": f"shot-{i}", "prompt": f"p {i}", "needs": ["stlye"]}) + "\n"
            for i in range(LINES)
        )
    )
    result, lookups = _counted(afc.cwd, "plan", "manifest.yaml")
    assert result.returncode == 2, result.stderr
    assert (
        "shots.jsonl line 1 (key 'shot-0'): field 'needs[0]': unknown key 'stlye' (did you "
        "mean 'style'?)" in result.stderr
    ), result.stderr
    assert lookups == 1, lookups  # not one for each of the 300 lines


def test_a_mistyped_default_need_is_looked_up_once(afc):
    data = manifest(
        [{"key": "style", "prompt": "s"}]
        + [{"key": f"shot-{i}", "prompt": f"p {i}"} for i in range(LINES)]
    )
    data["defaults"]["needs"] = ["stlye"]
    afc.write_manifest(data)
    result, lookups = _counted(afc.cwd, "plan", "manifest.yaml")
    assert result.returncode == 2, result.stderr
    assert "field 'defaults.needs[0]': unknown key 'stlye' (did you mean 'style'?)" in (
        result.stderr
    ), result.stderr
    assert lookups == 1, lookups
