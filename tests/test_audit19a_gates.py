"""Review gates, needs and reference images as a user meets them through the real ``afc``
command (SPEC §12), audit 19 (a): what the earlier audits' tests did not reach."""

from __future__ import annotations

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
