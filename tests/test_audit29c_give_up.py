"""Outside audit 29c, a studio's ledger after weeks of nightly cron runs: a job that failed for
good (a prompt the provider will never take, a shot cut from the edit) and that the studio has
given up on. It waits for a person ('stuck'), so 'afc resume' exits 1 and the cron wrapper's
'afc queue stats --fail-if stuck>0' alerts at every run, and no command ended that: 'afc cancel
KEY' said "already failed, left as it is", and 'afc retry KEY' then 'afc cancel KEY' left the
job queued between the two, for a worker polling the ledger to take and pay for. A failed
(or dead-lettered) job named to 'afc cancel' is given up: cancelled, in one transaction."""

from __future__ import annotations

import json

from conftest import ledger_count, manifest


def test_a_failed_job_given_up_stops_waiting_for_a_person(afc, ledger_url):
    on = ("--ledger", ledger_url)
    shots = [
        {"key": "shot-001", "prompt": "refused for ever", "params": {"fail": ["invalid"]}},
        {"key": "shot-002", "prompt": "fine"},
    ]
    afc.write_manifest(manifest(shots))
    assert afc("submit", "manifest.yaml", *on).returncode == 1
    assert afc.json("queue", "stats", *on)["stuck"] == 1
    assert afc("resume", *on).returncode == 1  # every night, for ever

    given_up = afc("cancel", "shot-001", *on)
    assert given_up.returncode == 0, given_up.stderr
    assert "b1/shot-001: cancelled (was failed: given up)" in given_up.stderr
    stats = afc("queue", "stats", "--fail-if", "stuck>0", *on)
    assert stats.returncode == 0, stats.stderr
    resumed = afc("resume", *on)
    assert resumed.returncode == 0, resumed.stderr
    # nothing rendered or paid for it since its failure; its history kept
    count = "SELECT COUNT(*) FROM attempts a JOIN jobs j ON j.id = a.job_id"
    assert ledger_count(afc, ledger_url, f"{count} WHERE j.key = 'shot-001'") == 1
    story = afc.json("show", "shot-001", *on)
    assert story["job"]["status"] == "cancelled"
    kinds = [event["kind"] for event in story["events"]]
    assert kinds[-3:] == ["failed", "retried", "cancelled"], kinds

    # a person who changes their mind retries it, as any cancelled job
    back = afc("retry", "shot-001", *on)
    assert back.returncode == 0, back.stderr
    assert json.loads(afc("status", "--json", *on).stdout)["counts"] == {
        "queued": 1,
        "succeeded": 1,
    }


def test_a_batch_cancel_leaves_its_failed_jobs_to_a_person(afc):
    """'afc cancel --batch B' cancels the unfinished work of a batch, as before: its failed jobs
    are given up one by one, by key."""
    shots = [
        {"key": "shot-001", "prompt": "refused", "params": {"fail": ["invalid"]}},
        {"key": "shot-002", "prompt": "later"},
    ]
    afc.write_manifest(manifest(shots))
    assert afc("submit", "manifest.yaml").returncode == 1
    afc.write_manifest(manifest([*shots, {"key": "shot-003", "prompt": "queued"}]))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    done = afc("cancel", "--batch", "b1", "--yes")
    assert done.returncode == 0, done.stderr
    statuses = dict(afc.rows("SELECT key, status FROM jobs"))
    assert statuses["shot-001"] == "failed"
    assert statuses["shot-003"] == "cancelled"
