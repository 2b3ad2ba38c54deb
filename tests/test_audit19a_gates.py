"""Review gates, needs and reference images as a user meets them through the real ``afc``
command (README "Review gates, dependencies and reference images"), audit 19 (a): what the earlier audits' tests did not reach."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import manifest

CHAIN = 1200  # longer than Python's default recursion limit (1000) allows a call per link


def chain_manifest(afc, n: int = CHAIN):
    """A chain of ``n`` jobs, each needing the one before; the head waits for a review."""
    jobs = [{"key": "j0", "prompt": "p0", "review": True}]
    jobs += [{"key": f"j{i}", "prompt": f"p{i}", "needs": [f"j{i - 1}"]} for i in range(1, n)]
    afc.write_manifest(manifest(jobs))


def test_a_long_chain_is_rejected_at_its_head(afc, ledger_url):
    """Rejecting (or cancelling) the head of a chain of 1,200 jobs failed with 'unexpected
    error: RecursionError' (exit 1): the rejection was refused whole, the job left awaiting
    review for ever; a cancel was written but its dependents left blocked; a retry of the
    head was refused the same way. Each link was one more nested call."""
    env = {"AFC_LEDGER": ledger_url}
    chain_manifest(afc)
    assert afc("submit", "manifest.yaml", "-q", env=env).returncode == 0
    shown = afc("review", "reject", "j0", "--reason", "too dark", env=env)
    assert shown.returncode == 0, shown.stderr
    stats = afc.json("queue", "stats", env=env)
    assert stats["failed"] == CHAIN - 1 and stats["blocked"] == 0, stats
    last = afc.json("show", f"j{CHAIN - 1}", env=env)
    assert last["job"]["error"]["code"] == "DEPENDENCY_FAILED", last["job"]
    # the chain follows a person's decision: resume passes it by (run.follow_decisions, a
    # walk with a list that reads each job's needs once: a call per link passed the
    # recursion limit, and a walk from each job to the head read its needs 720,000 times)
    resumed = afc("resume", env=env)
    assert resumed.returncode == 0, resumed.stderr


def test_a_long_chain_cancelled_and_retried_at_its_head(afc, ledger_url):
    env = {"AFC_LEDGER": ledger_url}
    chain_manifest(afc)
    # admitted without a run, then the head cancelled: every dependent fails at once
    assert afc("submit", "manifest.yaml", "--no-run", "-q", env=env).returncode == 0
    shown = afc("cancel", "j0", env=env)
    assert shown.returncode == 0, shown.stderr
    stats = afc.json("queue", "stats", env=env)
    assert stats["failed"] == CHAIN - 1 and stats["blocked"] == 0, stats
    # a retry of the head puts the whole chain back behind it
    shown = afc("retry", "j0", env=env)
    assert shown.returncode == 0, shown.stderr
    stats = afc.json("queue", "stats", env=env)
    assert stats["blocked"] == CHAIN - 1 and stats["failed"] == 0, stats


def test_a_rejections_reason_is_shown_by_afc_show_without_running_its_escapes(afc):
    """A reason or note is a person's words, typed into 'afc review' or into the review page
    of 'afc serve' (from another machine, with the token): 'afc show' printed them raw on the
    operator's terminal, an escape sequence in them run there (here: clear the screen, set
    the window's title), where 'afc status' and every table show them as \\xNN."""
    afc.write_manifest(manifest([{"key": "frame", "prompt": "a frame", "review": True}]))
    assert afc("submit", "manifest.yaml", "-q").returncode == 0
    reason = "too dark\x1b[2J\x1b]0;owned\x07 redo"
    assert afc("review", "reject", "frame", "--reason", reason, "--by", "x\x1b[8m").returncode == 0
    shown = afc("show", "frame")
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout, shown.stdout
    assert "too dark\\x1b[2J\\x1b]0;owned\\x07 redo" in shown.stdout
    # what was decided is kept as written: --json has it whole
    story = afc.json("show", "frame")
    assert story["decisions"][0]["note"] == reason


def _peak_mib(afc, *args: str) -> tuple[int, str]:
    """Run ``afc ARGS`` under a Python of its own that reports the peak resident memory of
    its children (the afc process; its helpers are smaller), in MiB."""
    import subprocess
    import sys

    probe = (
        "import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]);"
        " print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, *afc.command(*args)],
        cwd=afc.cwd,
        env=afc.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    code, peak = done.stdout.split()
    assert code == "0", done.stderr
    return int(peak), done.stderr


REFERENCE_MIB = 32


def reference_manifest(afc, params: dict, **top):
    """Twelve jobs sending one 32 MiB reference image (a PNG's first bytes, then filler)."""
    import os

    from afc_cli.providers.local import render_png

    with open(afc.cwd / "ref.png", "wb") as handle:
        handle.write(render_png("ref", 16, 16) + os.urandom(REFERENCE_MIB * 1024 * 1024))
    data = manifest([{"key": f"s{i:02d}", "prompt": f"shot {i}"} for i in range(12)], **top)
    data["defaults"]["inputs"] = [{"path": "ref.png"}]
    data["defaults"]["params"] = params
    afc.write_manifest(data)


@pytest.mark.parametrize("wait", ["provider limit", "backoff"])
def test_jobs_waiting_their_turn_do_not_hold_their_reference_images(afc, wait):
    """A job read its inputs before it waited for a provider's limit or out a backoff, and
    waits give the job's slot back: every job of the run waiting so held its reference
    images at once (12 jobs with a 32 MiB reference: 384 MiB; a batch of thousands more
    than the machine had, and the run killed with its calls in flight). Read once the job
    holds its slots, for each attempt, the bytes in memory are those of the jobs in a call."""
    if wait == "provider limit":
        reference_manifest(afc, {"latency_s": 0.05}, limits={"local": {"concurrency": 1}})
    else:
        # a 429 whose Retry-After (a floor over the backoff's draw, up to its cap) holds
        # every job a second: all twelve wait at once
        reference_manifest(afc, {"fail": ["rate_limited"], "retry_after_s": 1})
        data = yaml.safe_load((afc.cwd / "manifest.yaml").read_text())
        data["defaults"]["chain"][0]["backoff"] = {"base": 1, "cap": 1}
        afc.write_manifest(data)
    peak, err = _peak_mib(afc, "submit", "manifest.yaml", "-q", "--concurrency", "2")
    assert dict(afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status")) == {
        "succeeded": 12
    }, err
    # each attempt sent the reference, and says so
    sent = [json.loads(row[0]) for row in afc.rows("SELECT inputs_json FROM attempts")]
    assert len(sent) == (12 if wait == "provider limit" else 24)
    assert all(len(s) == 1 and s[0]["source"] == "ref.png" for s in sent), sent
    assert peak < 8 * REFERENCE_MIB, f"peak {peak} MiB"
