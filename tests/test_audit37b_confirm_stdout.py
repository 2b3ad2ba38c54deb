"""Outside audit 37b: the confirmation question writes nothing to stdout.

'afc retry --batch B --failed --json > retried.json' (or 'afc cancel --batch B --json | jq')
run by a person at a terminal asks 'retry these 2 jobs? [y/N]' on stderr, as README says,
but click's confirm reads the answer with input(" "), which writes its one-space prompt to
stdout: the JSON document began with a stray ' ' ('afc retry' without --json, whose lines all
go to stderr, left a lone space on stdout). README ("Commands"): with --json, stdout carries
one JSON document and nothing else. The whole question, that space included, now goes to
stderr; the answer is read as before.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import time

import pytest
from conftest import manifest


def _answered(afc, command: list[str], answer: bytes) -> tuple[int, bytes, str]:
    """Run 'afc COMMAND' with stdin and stderr on a terminal and stdout a pipe, answer its
    '[y/N]' question: its exit code, its stdout and what the terminal showed."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        afc.command(*command),
        cwd=afc.cwd,
        env=afc.env,
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=slave,
    )
    os.close(slave)
    said = b""
    deadline = time.time() + 60
    while b"[y/N]" not in said and time.time() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            said += os.read(master, 4096)
    os.write(master, answer)
    out = proc.stdout.read()
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                break
            chunk = os.read(master, 4096)
            if not chunk:
                break
            said += chunk
    except OSError:  # the child closed the terminal
        pass
    code = proc.wait(timeout=60)
    os.close(master)
    return code, out, said.decode(errors="replace")


@pytest.mark.parametrize("json_out", [True, False])
def test_a_confirmed_retry_writes_only_its_result_to_stdout(afc, json_out) -> None:
    data = manifest([{"key": k, "prompt": "p", "params": {"fail": ["invalid"]}} for k in "ab"])
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", "-q").returncode == 1
    command = ["retry", "--batch", "b1", "--failed", *(["--json"] if json_out else [])]
    code, out, said = _answered(afc, command, b"y\n")
    assert code == 0, said
    assert "retry these 2 jobs? [y/N]" in said, said
    if json_out:
        assert out.startswith(b"{"), out[:40]
        assert [j["key"] for j in json.loads(out)["retried"]] == ["a", "b"]
    else:
        assert out == b"", out  # its lines go to stderr
    assert afc.rows("SELECT DISTINCT status FROM jobs") == [("queued",)]


def test_a_confirmed_cancel_of_a_batch_writes_only_its_json_to_stdout(afc) -> None:
    afc.write_manifest(manifest([{"key": k, "prompt": "p"} for k in "ab"]))
    assert afc("submit", "manifest.yaml", "--no-run", "-q").returncode == 0
    code, out, said = _answered(afc, ["cancel", "--batch", "b1", "--json"], b"y\n")
    assert code == 0, said
    assert out.startswith(b"{"), out[:40]
    assert len(json.loads(out)["cancelled"]) == 2
    # a declined one: nothing on stdout, nothing changed (exit 2)
    afc.write_manifest(manifest([{"key": k, "prompt": "p"} for k in "cd"], batch="b2"))
    assert afc("submit", "manifest.yaml", "--no-run", "-q").returncode == 0
    code, out, said = _answered(afc, ["cancel", "--batch", "b2", "--json"], b"n\n")
    assert code == 2, said
    assert out == b"", out
    assert "declined; nothing was changed" in said, said
