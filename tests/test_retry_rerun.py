"""``afc retry a b c`` interrupted part-way, then run again as it was.

Each job's retry is its own transaction, and the interrupted command says those made are
kept. Run again as it was typed, it refused every job, the ones the first run had queued
again being "queued: it runs (or will) without a retry", and said nothing was changed (exit
2): the jobs it had not reached stayed cancelled, and a cron line or script that reran the
command never got them queued. Now a named job that is as an earlier retry left it (queued,
or blocked on its needs, that retry its last event) is reported as already retried, and the
rest are retried (``_retried_unrun`` in afc_cli/ops.py)."""

from __future__ import annotations

import json

from conftest import jobs, manifest
from typer.testing import CliRunner

from afc_cli.cli import app
from afc_cli.ledger import Ledger

KEYS = ["shot-001", "shot-002", "shot-003"]


def test_an_interrupted_retry_run_again_retries_the_rest(afc, monkeypatch):
    afc.write_manifest(manifest(jobs(3)))
    assert afc("submit", "--no-run", "manifest.yaml").returncode == 0
    assert afc("cancel", *KEYS).returncode == 0
    real = Ledger.retry
    calls = []

    def interrupted_after_one(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Ledger, "retry", interrupted_after_one)
    first = CliRunner().invoke(app, ["retry", *KEYS, "--ledger", str(afc.cwd / "afc.db")])
    assert first.exit_code == 130, first.output
    assert sorted(afc.rows("SELECT key, status FROM jobs")) == [
        ("shot-001", "queued"),
        ("shot-002", "cancelled"),
        ("shot-003", "cancelled"),
    ]

    again = afc("retry", *KEYS)
    assert again.returncode == 0, again.stderr
    assert "shot-001: already queued again by an earlier retry" in again.stderr
    assert "shot-002: queued again (was cancelled)" in again.stderr
    assert "run 'afc resume'" in again.stderr
    assert {status for _, status in afc.rows("SELECT key, status FROM jobs")} == {"queued"}

    # once more: nothing left to retry, each said, exit 0; --json names them
    result = afc("retry", *KEYS, "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["retried"] == []
    assert [i["key"] for i in out["unchanged"] if i["already_retried"]] == KEYS

    # the retried jobs render once each
    assert afc("resume").returncode == 0
    assert {status for _, status in afc.rows("SELECT key, status FROM jobs")} == {"succeeded"}
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(3,)]


def test_a_job_queued_by_no_retry_is_still_refused(afc):
    """Only an earlier retry's jobs are taken as already retried: a job queued by its
    submit, named to retry, is refused as before and nothing changes (exit 2)."""
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "--no-run", "manifest.yaml").returncode == 0
    assert afc("cancel", "shot-002").returncode == 0
    result = afc("retry", "shot-001", "shot-002")
    assert result.returncode == 2, result.stderr
    assert "it is queued: it runs (or will) without a retry" in result.stderr
    assert sorted(afc.rows("SELECT key, status FROM jobs")) == [
        ("shot-001", "queued"),
        ("shot-002", "cancelled"),
    ]
