"""Outside audit 44c: a job list whose jobs name, as ``job`` inputs, jobs listed after them
(a style frame at the end of the list, a sequence whose every shot takes the one before it
as its reference, listed last shot first) is checked in time linear in its jobs. Each such
job waits until the jobs it uses are resolved (``manifest.resolve_deferred``); the jobs
ready were found by scanning every job still waiting again after each wave, so a chain of
20,000 listed in reverse took 249 s to plan (5 s now), and a list of 100,000 shots naming a
style frame listed last took 139 s where the same list with the frame first took 16. Counted
as the calls that look up the key a job input names, never as a time."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import manifest

LINKS = 1500


def _chain(reverse: bool) -> str:
    """``LINKS`` shots, each taking the one before it as its reference image."""
    lines = [{"key": "f0", "prompt": "first frame"}] + [
        {"key": f"f{i}", "prompt": f"frame {i}", "inputs": [{"job": f"f{i - 1}"}]}
        for i in range(1, LINKS + 1)
    ]
    if reverse:
        lines.reverse()
    return "".join(json.dumps(line) + "\n" for line in lines)


def _counted(cwd, *args: str) -> tuple[subprocess.CompletedProcess, int]:
    """``afc ARGS`` in a child process, and how often it looked up an input job's key."""
    code = (
        "import atexit, sys\n"
        "import afc_cli.manifest as m\n"
        "calls = [0]\n"
        "own = m._own_key\n"
        "def counted(batch, ref):\n"
        "    calls[0] += 1\n"
        "    return own(batch, ref)\n"
        "m._own_key = counted\n"
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


def test_a_chain_listed_last_link_first_is_checked_in_linear_time(afc):
    top = manifest([], jobs_from="frames.jsonl")
    del top["jobs"]
    afc.write_manifest(top)
    (afc.cwd / "frames.jsonl").write_text(_chain(reverse=True))
    result, lookups = _counted(afc.cwd, "plan", "manifest.yaml", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["new"] == LINKS + 1
    # a handful of lookups a link (its needs, its input's hash, the order), not one for
    # every link still waiting at each of the chain's 1,500 waves (1.1 million)
    assert lookups < 20 * LINKS, lookups

    # the same requests whichever way the list runs: each hash covers its reference's
    admitted = afc("submit", "manifest.yaml", "--no-run", "-q")
    assert admitted.returncode == 0, admitted.stderr
    reversed_hashes = dict(afc.rows("SELECT key, request_hash FROM jobs"))
    (afc.cwd / "frames.jsonl").write_text(_chain(reverse=False))
    forward = afc("plan", "manifest.yaml", "--json")
    assert forward.returncode == 0, forward.stderr
    plan = json.loads(forward.stdout)
    assert plan["replayed"] == LINKS + 1 and plan["conflicts"] == [], forward.stdout
    assert len(set(reversed_hashes.values())) == LINKS + 1
