"""Outside audit 54d: the live panel of a run that leaves a job blocked ends with the ledger's
figures.

A submit whose style frame stopped for a person's review left its shot ``blocked``: the
summary said so (``1 awaiting_review, 1 blocked``) and the ledger held no queued job, but the
panel's last state, on the terminal above the summary, read ``1/2`` and ``queued 1``: a job
it never told ended, as if still to render. The blocked job's end is now told as any
other's (and in plain lines, ``ended blocked``, beside ``ended awaiting_review``); a job that
a decision made during the run puts back, run at the run's end, is counted once."""

from __future__ import annotations

import signal
import time

from conftest import manifest
from terminal import on_pty


def gated(afc) -> None:
    afc.write_manifest(
        manifest(
            [
                {"key": "style", "prompt": "style frame", "review": True},
                {"key": "shot", "prompt": "a shot", "needs": ["style"]},
            ]
        )
    )


def test_the_panel_ends_with_the_blocked_job_counted_ended(afc):
    gated(afc)
    screen = on_pty(afc.command("submit", "manifest.yaml"), cwd=afc.cwd, env=afc.env, columns=120)
    assert screen.returncode == 0, screen.output
    assert afc.json("queue", "stats")["queued"] == 0
    panel = [line for line in screen.lines if line.startswith("ok ")]
    assert panel and panel[-1].split() == ["ok", "0", "failed", "0", "waiting", "0", "in",
                                           "flight", "0", "queued", "0"], panel[-1]  # fmt: skip
    bars = [line for line in screen.lines if line.startswith("rendering ")]
    assert bars[-1].split()[-2] == "2/2", bars[-1]


def test_plain_lines_say_the_blocked_job_ended_blocked(afc):
    gated(afc)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    assert "b1/style: ended awaiting_review" in result.stderr
    assert "b1/shot: ended blocked" in result.stderr, result.stderr


def test_a_job_ended_blocked_then_run_at_the_runs_end_is_counted_once():
    from afc_cli.progress import RunProgress

    progress = RunProgress(1)
    job = {"id": "j1", "batch": "b1", "key": "shot"}
    progress.event(job, "ended", "blocked")
    assert progress.finished == 1 and progress.other == 1
    progress.event(job, "started", "")  # a decision put it back: the run's end runs it
    progress.event(job, "ended", "succeeded")
    assert (progress.finished, progress.succeeded, progress.other) == (1, 1, 0)


def test_the_panel_ends_with_a_job_left_to_another_process_counted_ended(afc):
    """A resume beside another run that holds a job leaves it alone (the summary: 'being run
    by another afc process ... this run left it alone'); its panel ended on '1/2' and
    'queued 1', the job never told ended here."""
    afc.write_manifest(
        manifest(
            [
                {"key": "slow", "prompt": "slow one", "params": {"latency_s": 60}},
                {"key": "fine", "prompt": "fine one"},
            ]
        )
    )
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    holder = afc.popen("resume", "--concurrency", "1")
    try:
        deadline = time.time() + 60
        sql = "SELECT COUNT(*) FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE j.key = 'slow'"
        while not afc.rows(sql)[0][0]:
            assert time.time() < deadline and holder.poll() is None, "the slow call never started"
            time.sleep(0.05)
        screen = on_pty(afc.command("resume"), cwd=afc.cwd, env=afc.env, columns=120)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    assert "this run left it alone" in screen.output, screen.output
    panel = [line for line in screen.lines if line.startswith("ok ")]
    assert panel[-1].split()[-2:] == ["queued", "0"], panel[-1]
    bars = [line for line in screen.lines if line.startswith("rendering ")]
    assert bars[-1].split()[-2] == "2/2", bars[-1]
