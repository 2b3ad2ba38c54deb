"""Outside audit 22a (review gates and reference images): through the real ``afc`` command,
on the local provider and fake providers at the wire."""

from __future__ import annotations

import signal

import pytest
from conftest import manifest


def _reviewed() -> dict:
    return manifest(
        [
            {"key": "frame", "prompt": "a style frame", "review": True},
            {"key": "shot", "prompt": "a shot", "inputs": [{"job": "frame"}]},
        ]
    )


@pytest.mark.parametrize("decision", [None, "reject"])
def test_a_reviewed_jobs_spool_file_a_crash_left_is_swept_as_a_successs_is(
    afc, ledger_url, decision
):
    """Found by outside audit 22a: a run killed after a reviewed job's await_review commit,
    before its spool file (a whole copy of the stored output) was removed, left the file; the
    sweep at a run's start removed only the files of succeeded jobs, so once a person rejected
    the output (final: no run ever touches the job again) the file stayed for good on the disk
    AFC_MIN_FREE_MB guards, and until a decision for as long as the review took."""
    afc.write_manifest(_reviewed())
    afc.env["AFC_LEDGER"] = ledger_url
    died = afc("submit", "manifest.yaml", env={"AFC_CRASH_POINT": "after_terminal"})
    assert died.returncode == -signal.SIGKILL, died.stderr
    spool = afc.cwd / ("afc-spool" if ledger_url.startswith("postgresql") else "afc.db-spool")
    assert len(list(spool.glob("*.spool"))) == 1  # the window was hit
    if decision == "reject":
        decided = afc("review", "reject", "frame", "--reason", "too dark")
        assert decided.returncode == 0, decided.stderr
    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert list(spool.glob("*.spool")) == []  # stored and verified: the copy is no one's
    assert (afc.outputs() / "b1" / "frame.png").exists()
    assert afc.json("status", "--all")["counts"] == (
        {"awaiting_review": 1, "blocked": 1} if decision is None else {"rejected": 1, "failed": 1}
    )


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_a_decision_the_locked_ledger_could_not_take_says_to_decide_again(
    afc, monkeypatch, decision
):
    """Found by outside audit 22a: 'afc review approve' on a SQLite ledger whose write lock
    another process held past the busy timeout (a sqlite3 shell, a backup) said 'The run
    stopped; every job stays resumable as of the last commit: ... then run afc resume': no run
    had stopped, and 'afc resume' decides nothing (the job stays awaiting review, the jobs
    that need it blocked). It now says that nothing was decided and to run the decision
    again, still exit 1 (a ledger that cannot be written)."""
    import sqlite3

    from typer.testing import CliRunner

    from afc_cli.cli import app

    afc.write_manifest(_reviewed())
    assert afc("submit", "manifest.yaml").returncode == 0
    monkeypatch.setattr("afc_cli.ledger.sqlite.BUSY_TIMEOUT_S", 0.2)
    monkeypatch.setattr("sys.argv", ["afc", "review", decision, "frame"])
    args = ["review", decision, "frame", "--ledger", str(afc.cwd / "afc.db")]
    if decision == "reject":
        args += ["--reason", "too dark"]
    holder = sqlite3.connect(afc.cwd / "afc.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        result = CliRunner().invoke(app, args)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert result.exit_code == 1, result.output
    said = " ".join(result.output.split())
    assert "database is locked; nothing was decided (a decision is one transaction;" in said
    assert f"then run this again: afc review {decision} frame" in said, said
    assert "afc resume" not in said and "The run stopped" not in said, said
    assert afc.rows("SELECT status FROM jobs WHERE key = 'frame'") == [("awaiting_review",)]
    again = afc(*args[:3], *args[5:])
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize("shown", [False, True])
def test_a_decision_on_the_review_page_the_locked_ledger_could_not_take_is_a_503(
    afc, monkeypatch, capsys, shown
):
    """Found by outside audit 22a: Approve (or Approve the N shown) on afc serve's review
    page, while another process held the SQLite ledger's write lock past the busy timeout,
    was a 500 'Internal Server Error' with a traceback on serve's stderr: the reviewer was
    not told that nothing was decided, nor why. It is now the 503 page the other views give
    a ledger they cannot use, saying so, with its one line on stderr."""
    pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")
    import sqlite3
    import warnings

    from afc_cli.web.server import build_app

    afc.write_manifest(_reviewed())
    assert afc("submit", "manifest.yaml").returncode == 0
    monkeypatch.setattr("afc_cli.ledger.sqlite.BUSY_TIMEOUT_S", 0.2)
    app = build_app(str(afc.cwd / "afc.db"), batch=None, host="127.0.0.1", token=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # starlette's own note on its test client
        from starlette.testclient import TestClient

        client = TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False)
    form = {"key": "frame", "batch": "b1", "form_token": app.state.form_token}
    address = "/review/approve-shown" if shown else "/review/approve"
    [(job_id,)] = afc.rows("SELECT id FROM jobs WHERE key = 'frame'")
    assert client.get(f"/thumb/{job_id}").status_code == 200  # the picture shown
    holder = sqlite3.connect(afc.cwd / "afc.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        answer = client.post(address, data=form, follow_redirects=False)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert answer.status_code == 503, answer.text
    assert "nothing was decided" in answer.text and "database is locked" in answer.text
    assert "Traceback" not in capsys.readouterr().err
    assert afc.rows("SELECT status FROM jobs WHERE key = 'frame'") == [("awaiting_review",)]
    again = client.post(address, data=form, follow_redirects=False)
    assert again.status_code == 303, again.text
    assert afc.rows("SELECT status FROM jobs WHERE key = 'frame'") == [("succeeded",)]


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_an_interrupted_decision_says_to_decide_again_not_to_resume(afc, monkeypatch, decision):
    """Found by outside audit 22a: Ctrl-C on 'afc review approve' (say while it waited for the
    ledger's write lock another process held) said 'interrupted; every job stays resumable
    (run afc resume)': 'afc resume' decides nothing, and the job stayed awaiting review. It
    now says to run the decision again (exit 130 as before)."""
    from typer.testing import CliRunner

    from afc_cli.cli import app
    from afc_cli.ledger import Ledger

    afc.write_manifest(_reviewed())
    assert afc("submit", "manifest.yaml").returncode == 0

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(Ledger, "decide_reviews", interrupted)
    monkeypatch.setattr("sys.argv", ["afc", "review", decision, "frame"])
    args = ["review", decision, "frame", "--ledger", str(afc.cwd / "afc.db")]
    result = CliRunner().invoke(app, [*args, *(["--reason", "dark"] * (decision == "reject"))])
    assert result.exit_code == 130, result.output
    said = " ".join(result.output.split())
    assert "run this again (a decision is one transaction" in said, said
    assert f"afc review {decision} frame" in said and "afc resume" not in said, said
    assert afc.rows("SELECT status FROM jobs WHERE key = 'frame'") == [("awaiting_review",)]


def test_the_review_command_afc_status_names_can_be_run_as_said_with_two_batches(afc):
    """Found by outside audit 22a: with two batches of one ledger each holding a 'frame'
    awaiting review, afc status (and its --json 'waiting') told each 'afc review approve
    frame (or reject)', which afc refuses (exit 2: a key of several batches, add --batch).
    With several batches the command it names names the batch; run as said, it decides."""
    import shlex

    for batch in ("b1", "b2"):
        afc.write_manifest({**_reviewed(), "batch": batch}, f"{batch}.yaml")
        assert afc("submit", f"{batch}.yaml").returncode == 0
    waiting = {
        (job["batch"], job["key"]): job["waiting"]
        for job in afc.json("status")["jobs"]
        if job["status"] == "awaiting_review"
    }
    assert set(waiting) == {("b1", "frame"), ("b2", "frame")}
    said = waiting["b2", "frame"]
    assert said.startswith("awaiting a person's review: afc review approve frame --batch b2")
    command = shlex.split(said.split(": ", 1)[1].removesuffix(" (or reject)"))
    decided = afc(*command[1:])
    assert decided.returncode == 0, decided.stderr
    assert afc.rows("SELECT batch FROM jobs WHERE key = 'frame' AND status = 'succeeded'") == [
        ("b2",)
    ]


@pytest.mark.parametrize("decision", ["reject", "cancel"])
def test_a_dependent_two_links_down_is_not_told_to_retry_what_fails_again_at_once(afc, decision):
    """Found by outside audit 22a: a job whose need failed DEPENDENCY_FAILED in turn (a
    title card needing a shot that needs a rejected or cancelled style frame) was told 'once
    'shot' is fixed, 'afc retry shot' lets this job run again'; done, the shot was blocked
    again behind the style frame, still rejected or cancelled, and failed again at the next
    run (exit 1), the title card with it. It now names the need as failed for a job it needs
    and says to retry the job that ended badly, which puts both back."""
    data = manifest(
        [
            {"key": "style", "prompt": "a style frame", "review": True},
            {"key": "shot", "prompt": "a shot", "inputs": [{"job": "style"}]},
            {"key": "title", "prompt": "a title card", "needs": ["shot"]},
        ]
    )
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    if decision == "reject":
        ended = afc("review", "reject", "style", "--reason", "too dark")
    else:
        ended = afc("cancel", "style")
    assert ended.returncode == 0, ended.stderr
    title = afc.json("show", "title")["job"]["error"]["message"]
    assert title.startswith("need 'shot' ended failed, itself DEPENDENCY_FAILED"), title
    assert "afc retry shot" not in title, title
    if decision == "cancel":  # the job that ended badly, retried, puts both back
        assert afc("retry", "style").returncode == 0
        statuses = {job["key"]: job["status"] for job in afc.json("status", "--all")["jobs"]}
        assert statuses == {"style": "queued", "shot": "blocked", "title": "blocked"}
