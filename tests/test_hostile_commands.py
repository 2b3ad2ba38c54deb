"""Commands given surprising arguments or run side by side (issue 12): a clear message, the
documented exit code, and exit 2 only when nothing was written."""

from __future__ import annotations

import shlex
import sys
import time

from conftest import jobs, manifest


def test_cancel_with_an_unknown_key_cancels_nothing(afc):
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    result = afc("cancel", "shot-001", "nonexistent")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "no job with key 'nonexistent'" in result.stderr
    assert "nothing was changed" in result.stderr
    assert afc.rows("SELECT key, status FROM jobs ORDER BY key") == [
        ("shot-001", "queued"),
        ("shot-002", "queued"),
    ]
    assert afc("cancel", "shot-001").returncode == 0
    assert afc.rows("SELECT status FROM jobs WHERE key = 'shot-001'") == [("cancelled",)]


def test_resume_beside_a_submit_says_the_other_process_has_the_jobs(afc):
    afc.write_manifest(manifest(jobs(2)))
    release = afc.cwd / "release"  # the submit's renders return once the resume has looked
    submit = afc.popen("submit", "manifest.yaml", env={"AFC_LOCAL_RELEASE": str(release)})
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if (afc.cwd / "afc.db").exists():
                try:
                    held = afc.rows("SELECT COUNT(*) FROM jobs WHERE lease_owner IS NOT NULL")
                except Exception:  # noqa: BLE001 - the ledger is being created
                    held = [(0,)]
                if held[0][0] == 2:
                    break
            time.sleep(0.05)
        else:
            raise AssertionError("the submit never claimed its jobs")
        result = afc("resume")
        assert "Traceback" not in result.stderr
        # both jobs, said once (jobs left for the same reason share a line)
        assert "2 jobs running at render (b1/shot-001, b1/shot-002" in result.stderr
        assert result.stderr.count("being run by another afc process (pid ") == 1, result.stderr
        assert f"pid {submit.pid} " in result.stderr
        assert "running at render: \n" not in result.stderr
    finally:
        release.touch()
        assert submit.wait(timeout=60) == 0


def test_a_submit_interrupted_before_its_run_says_to_submit_again(tmp_path, monkeypatch):
    """Interrupted while it admits, a submit may have admitted nothing: 'afc resume' would find
    no job and exit 0, the batch never rendered (found by an outside audit). The advice is the
    submit itself, which admits what is missing and resumes the rest."""
    from typer.testing import CliRunner

    from afc_cli import cli, run

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(run, "submit", interrupted)
    monkeypatch.setattr(cli, "_interrupt_on_sigterm", lambda: None)
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    # the advice is the command as typed, every option kept (a review found --no-run and
    # --max-spend dropped: the advice would have rendered everything, uncapped)
    for args in (
        ["submit", "my shots.yaml", "--no-run"],
        ["submit", "m.yaml", "--max-spend", "5", "--ledger", "b.db", "--no-run"],
    ):
        monkeypatch.setattr(sys, "argv", ["afc", *args])
        result = runner.invoke(cli.app, args)
        assert result.exit_code == 130
        assert result.stderr.strip() == (
            "afc: interrupted; nothing is lost: run this again (it admits what is missing): "
            + shlex.join(["afc", *args])
        )


def test_arguments_that_are_not_utf8_are_refused_before_anything_is_written(afc):
    """Bytes the locale cannot decode reach Python as surrogate escapes; writing one to the
    ledger was 'a bug in afc' (exit 1) after the ledger and output folder were created."""
    afc.write_manifest(manifest(jobs(1)))
    odd = (afc.cwd / "manifest.yaml").read_bytes()
    (afc.cwd / b"m\xff.yaml".decode("utf-8", "surrogateescape")).write_bytes(odd)
    for args in (("submit", b"m\xff.yaml"), ("show", b"k\xff"), ("status", "--batch", b"b\xfe")):
        result = afc(
            *[a.decode("utf-8", "surrogateescape") if isinstance(a, bytes) else a for a in args]
        )
        assert result.returncode == 2, result.stderr
        assert "is not UTF-8 text" in result.stderr and "Traceback" not in result.stderr
    assert not (afc.cwd / "afc.db").exists()
    assert not (afc.cwd / "afc-outputs").exists()


def test_a_key_of_two_batches_is_neither_retried_nor_cancelled_without_batch(afc):
    """Two films may both have a shot-001: a bare key names neither, so retry and cancel
    refuse it (exit 2, nothing changed), as show and review do; with --batch one job acts."""
    afc.write_manifest(manifest(jobs(1)))
    afc.write_manifest(manifest(jobs(1), batch="b2"), "m2.yaml")
    for name in ("manifest.yaml", "m2.yaml"):
        assert afc("submit", name, "--no-run").returncode == 0
    both = "SELECT batch, status FROM jobs ORDER BY batch"
    refused = afc("cancel", "shot-001")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "'shot-001' is a key of several batches ('b1', 'b2'): add --batch" in refused.stderr
    assert "nothing was changed" in refused.stderr
    assert afc.rows(both) == [("b1", "queued"), ("b2", "queued")]
    assert afc("cancel", "shot-001", "--batch", "b1").returncode == 0
    assert afc("cancel", "shot-001", "--batch", "b2").returncode == 0
    # the next run would pay for every job a retry queued: one key never queues two
    refused = afc("retry", "shot-001")
    assert refused.returncode == 2 and "several batches" in refused.stderr
    assert afc.rows(both) == [("b1", "cancelled"), ("b2", "cancelled")]
    assert afc.json("retry", "shot-001", "--batch", "b2")["retried"] == [
        {"key": "shot-001", "batch": "b2", "was": "cancelled", "status": "queued"}
    ]
    assert afc.rows(both) == [("b1", "cancelled"), ("b2", "queued")]


def test_text_an_ascii_terminal_cannot_write_is_escaped_not_a_crash(afc):
    """PYTHONIOENCODING=ascii (or a C locale) and a prompt in any other script: afc show
    ended in "unexpected error: UnicodeEncodeError (a bug in afc)", exit 1."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "café ☕ 東京"}]))
    assert afc("submit", "manifest.yaml").returncode == 0
    ascii_only = {"PYTHONIOENCODING": "ascii"}
    for args in (("show", "a"), ("status", "--all"), ("outputs",)):
        result = afc(*args, env=ascii_only)
        assert result.returncode == 0, (args, result.stderr)
        assert "Traceback" not in result.stderr and "a bug in afc" not in result.stderr
    assert "caf\\xe9 \\u2615 \\u6771\\u4eac" in afc("show", "a", env=ascii_only).stdout
