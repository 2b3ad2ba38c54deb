"""Outside audit 30b (the maintainer's known item 'an attempt left started on a job cancelled
while its worker polled it, that worker then cut off from the ledger, stays started; the
costs report counts it as unknown and unpriced, but afc show lists it as started'): 'afc show'
said 'started', a call in flight, beside a job that is cancelled, while 'afc costs report'
counted the same attempt as one of unknown outcome. It says so now, in the table and in
--json (the attempt's status and error), as the costs report counts it."""

from __future__ import annotations

import json
import sqlite3
import time

from conftest import manifest


def _left_started(afc) -> None:
    afc.write_manifest(manifest([{"key": "shot-1", "prompt": "a lighthouse"}]))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    conn = sqlite3.connect(afc.cwd / "afc.db")
    with conn:
        (job_id,) = conn.execute("SELECT id FROM jobs").fetchone()
        # the state a worker cut off from the ledger leaves: its call's row, the job cancelled
        conn.execute(
            "INSERT INTO attempts (job_id, number, chain_index, provider, model, status, owner,"
            " started_at) VALUES (?, 1, 0, 'local', 'm1', 'started', 'gone-host:1:1', ?)",
            (job_id, time.time() - 600),
        )
        conn.execute(
            "UPDATE jobs SET status = 'cancelled', attempts = 1, finished_at = ? WHERE id = ?",
            (time.time(), job_id),
        )
    conn.close()


def test_show_names_an_attempt_left_started_on_an_ended_job_as_the_costs_report_does(afc):
    _left_started(afc)
    report = json.loads(afc("costs", "report", "--json").stdout)
    assert report["total"]["unknown_attempts"] == 1, report

    story = json.loads(afc("show", "shot-1", "--json").stdout)
    [attempt] = story["attempts"]
    assert attempt["status"] == "unknown", attempt
    assert "unknown outcome" in attempt["error"] and "cancelled" in attempt["error"], attempt
    assert attempt["cost"] is None

    table = afc("show", "shot-1")  # on a pipe: tab-separated, headed by the --json names
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    header = lines.index(
        "number\tmodel\tstatus\terror_class\thttp_status\twaited\tduration"
        "\tusage\tcost\tcost_source\terror"
    )
    cells = lines[header + 1].split("\t")
    assert (cells[0], cells[2], cells[8]) == ("1", "unknown", "unpriced"), table.stdout
    assert "unknown outcome" in cells[10] and "cancelled" in cells[10], table.stdout


def test_show_leaves_a_call_in_flight_of_an_active_job_started(afc):
    afc.write_manifest(manifest([{"key": "shot-1", "prompt": "a lighthouse"}]))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    conn = sqlite3.connect(afc.cwd / "afc.db")
    with conn:
        (job_id,) = conn.execute("SELECT id FROM jobs").fetchone()
        conn.execute(
            "INSERT INTO attempts (job_id, number, chain_index, provider, model, status, owner,"
            " started_at) VALUES (?, 1, 0, 'local', 'm1', 'started', 'gone-host:1:1', ?)",
            (job_id, time.time()),
        )
        conn.execute(
            "UPDATE jobs SET status = 'running', attempts = 1, lease_owner = 'gone-host:1:1',"
            " lease_expires = ? WHERE id = ?",
            (time.time() + 600, job_id),
        )
    conn.close()
    story = json.loads(afc("show", "shot-1", "--json").stdout)
    assert [(a["status"], a["error"]) for a in story["attempts"]] == [("started", None)]
