"""Review gates and needs under ``afc worker`` on a PostgreSQL ledger: workers claim only
active jobs, so each claim first settles the blocked jobs whose needs have all ended
(``Ledger.settle_ready_blocked``); a job waiting on a review stays blocked, and a worker
with ``--until-idle`` does not wait for a person."""

from __future__ import annotations

import pytest
from test_issue17_review import style_manifest
from test_postgres_e2e import PgAfc


@pytest.fixture
def pg(tmp_path, pg_url) -> PgAfc:
    return PgAfc(tmp_path, pg_url)


def _worker(pg: PgAfc):
    return pg("worker", "--until-idle", "--poll", "0.1", "--concurrency", "2", timeout=120)


def test_workers_run_a_reviewed_style_frame_then_its_shots_once_approved(pg):
    style_manifest(pg)
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    first = _worker(pg)
    assert first.returncode == 0, first.stderr
    statuses = dict(pg.rows("SELECT key, status FROM jobs"))
    assert statuses == {
        "style": "awaiting_review",
        "shot-1": "blocked",
        "shot-2": "blocked",
        "title": "blocked",
    }
    approved = pg("review", "approve", "style", "--by", "ana")
    assert approved.returncode == 0, approved.stderr
    second = _worker(pg)
    assert second.returncode == 0, second.stderr
    assert dict(pg.rows("SELECT key, status FROM jobs")) == dict.fromkeys(statuses, "succeeded")
    # each shot rendered once, after the style frame, with the style frame's bytes as input
    attempts = pg.rows(
        "SELECT j.key, COUNT(*) FROM attempts a JOIN jobs j ON j.id = a.job_id GROUP BY j.key"
    )
    assert dict(attempts) == dict.fromkeys(statuses, 1)
    style_sha = pg.rows("SELECT output_sha256 FROM jobs WHERE key = 'style'")[0][0]
    inputs = pg.rows(
        "SELECT a.inputs_json FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE j.key = 'shot-1'"
    )[0][0]
    assert style_sha in inputs
    assert pg.rows("SELECT decision, decided_by FROM reviews") == [("approved", "ana")]
    # the pictures read the same ledger: every output on the contact sheet, its model named
    report = pg("report", "--html", "report.html")
    assert report.returncode == 0, report.stderr
    page = (pg.cwd / "report.html").read_text()
    assert all(key in page for key in statuses) and "local/" in page


def test_a_rejected_need_fails_its_dependents_under_workers(pg):
    style_manifest(pg)
    assert pg("submit", "manifest.yaml", "--no-run").returncode == 0
    assert _worker(pg).returncode == 0
    assert pg("review", "reject", "style", "--reason", "too dark").returncode == 0
    assert _worker(pg).returncode == 0
    rows = dict(pg.rows("SELECT key, error_code FROM jobs WHERE key <> 'style'"))
    assert rows == dict.fromkeys(("shot-1", "shot-2", "title"), "DEPENDENCY_FAILED")
    assert pg.rows(
        "SELECT COUNT(*) FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE j.key <> 'style'"
    ) == [(0,)]
