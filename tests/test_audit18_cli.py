"""Outside audit 18: the CLI's words and exit codes (README "Exit codes", "Money")."""

from __future__ import annotations

import signal

import pytest
from conftest import jobs, manifest, wait_for


def test_a_budget_refuses_no_finished_batch_for_its_unpriced_models(afc):
    """A finished batch on a model without a rate card, submitted again under --max-spend
    (a cron line that always passes one): exit 2, 'a budget needs a per-image rate card for
    every model that may run', though every job was done and nothing would be called; the
    plan said the submit would be refused. Only the jobs a run may render are checked: a
    new job on that model is still refused, writing nothing."""
    data = manifest([{"key": "a", "prompt": "a"}])
    data["defaults"]["chain"][0]["model"] = "unpriced"
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    again = afc("submit", "manifest.yaml", "--max-spend", "1")
    assert again.returncode == 0, again.stderr
    for args in (("plan",), ("submit", "--dry-run")):
        planned = afc(*args, "manifest.yaml", "--max-spend", "1", "--json")
        assert planned.returncode == 0, planned.stderr
        assert afc.json(*args, "manifest.yaml", "--max-spend", "1")["problems"] == []
    data["jobs"].append({"key": "b", "prompt": "b"})
    afc.write_manifest(data)
    refused = afc("submit", "manifest.yaml", "--max-spend", "1")
    assert refused.returncode == 2 and "local/unpriced" in refused.stderr
    assert afc.rows("SELECT key FROM jobs") == [("a",)]
    assert afc("plan", "manifest.yaml", "--max-spend", "1").returncode == 2


def test_retry_of_a_job_with_needs_says_it_is_blocked_not_queued(afc):
    """'afc retry' of a job failed DEPENDENCY_FAILED said 'queued again (was failed)' and 'run
    afc resume to render them', though the retry put it back to blocked (its need still
    failed): the next run renders nothing of it. It says blocked, and --json gives each
    retried job's status."""
    data = manifest(
        [
            {"key": "a", "prompt": "a", "params": {"fail": ["auth"]}},
            {"key": "b", "prompt": "b", "needs": ["a"]},
            {"key": "c", "prompt": "c", "params": {"fail": ["auth"]}},
        ]
    )
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 1
    assert dict(afc.rows("SELECT key, status FROM jobs")) == {
        "a": "failed",
        "b": "failed",
        "c": "failed",
    }
    retried = afc("retry", "b", "c")
    assert retried.returncode == 0, retried.stderr
    assert "b1/b: blocked again (was failed)" in retried.stderr
    assert "b1/b: queued again" not in retried.stderr
    assert "b1/c: queued again (was failed)" in retried.stderr
    afc("cancel", "b", "c")
    assert afc("retry", "--batch", "b1", "--cancelled", "--yes").returncode == 0
    out = afc.json("retry", "--batch", "b1", "--failed", "--yes")
    assert [(r["key"], r["status"]) for r in out["retried"]] == [("a", "queued")]
    assert dict(afc.rows("SELECT key, status FROM jobs")) == {
        "a": "queued",
        "b": "blocked",
        "c": "queued",
    }


def test_queue_stats_counts_no_killed_runs_jobs_in_flight(afc):
    """A run killed mid-call (SIGKILL, an OOM kill) leaves its jobs 'running' with the lease of
    a dead process: 'afc status' said 'the afc process running it is gone', while 'afc queue
    stats' counted them in_flight, so an operator saw renders under way that nothing ran. They
    are counted as process_gone (--fail-if 'process_gone>0' alerts), not in flight."""
    afc.write_manifest(manifest(jobs(2, latency_s=60)))
    proc = afc.popen("submit", "manifest.yaml", "--concurrency", "2")
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 2)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert afc.rows("SELECT DISTINCT status FROM jobs") == [("running",)]
    status = afc.json("status")
    assert all("process running it is gone" in job["waiting"] for job in status["jobs"])
    stats = afc.json("queue", "stats")
    assert (stats["in_flight"], stats["delayed"]) == (0, 0)
    assert stats["process_gone"] == 2
    alert = afc("queue", "stats", "--fail-if", "process_gone>0")
    assert alert.returncode == 1 and "process_gone=2" in alert.stderr


def test_counts_of_one_are_said_in_the_singular(afc):
    """'afc worker claimed 1 jobs in 1 rounds', 'afc report: 1 jobs, 1 pictures', 'afc ledger
    copy: 1 batches, 1 jobs, 0 job_needs, ...' (table names read as nouns), 'afc show':
    'delivered after 1 tries' (tests/test_webhooks.py), 'afc ledger copy': '1 files wait'
    (tests/test_ledger_copy.py), a provider limit's '1 calls in flight'."""
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    worker = afc("worker", "--until-idle")
    assert worker.returncode == 0, worker.stderr
    assert "afc: worker claimed 1 job in 1 round;" in worker.stderr, worker.stderr
    report = afc("report", "--html", "report.html")
    assert report.returncode == 0, report.stderr
    assert "1 job, 1 picture, 0 failed" in report.stderr, report.stderr
    copied = afc("ledger", "copy", "afc.db", "copy.db")
    assert copied.returncode == 0, copied.stderr
    assert "rows: batches 1, jobs 1, " in copied.stdout, copied.stdout


def test_a_provider_limit_of_one_call_says_one_call(afc):
    """A provider's limits of one call ('limits: {local: {concurrency: 1}}'): the job that
    waits for the slot said '1 calls in flight across this ledger (limit 1)'."""
    from afc_cli.costs import RateCards
    from afc_cli.ledger import Ledger, ProviderBusy
    from afc_cli.manifest import load_manifest

    m = load_manifest(afc.write_manifest(manifest(jobs(2))))
    ledger = Ledger(str(afc.cwd / "afc.db"))
    try:
        ledger.admit(m, "file:///tmp/x", RateCards())
        first = ledger.claim(m.jobs[0].job_id, 60)
        assert ledger.start_attempt(first, 0, "local", "m1", None, durable=False, limit=(1, None))
        second = ledger.claim(m.jobs[1].job_id, 60)
        with pytest.raises(ProviderBusy) as busy:
            ledger.start_attempt(second, 0, "local", "m1", None, durable=False, limit=(1, None))
        assert "1 call in flight across this ledger (limit 1)" in busy.value.reason
    finally:
        ledger.close()


def test_a_finished_batch_is_not_refused_for_an_api_key_it_no_longer_needs(afc, fake):
    """A finished OpenAI batch, submitted again (cron) where OPENAI_API_KEY is no longer set
    (rotated out, another machine): exit 2 'API key not set in the environment', though no
    provider would be called. Only the jobs a run may render need their keys, as for a
    budget's rate cards; a new job on that provider is still refused, nothing written, and
    on a new ledger the refusal comes before the ledger is made."""
    data = manifest([{"key": "a", "prompt": "a lighthouse"}])
    data["defaults"]["chain"] = [{"provider": "openai", "model": "gpt-image-1", "attempts": 1}]
    data["rates"] = [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}]
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    afc.env.pop("OPENAI_API_KEY")
    again = afc("submit", "manifest.yaml", "--max-spend", "1")
    assert again.returncode == 0, again.stderr
    planned = afc.json("plan", "manifest.yaml")
    assert planned["environment"] == [], planned
    data["jobs"].append({"key": "b", "prompt": "b"})
    afc.write_manifest(data)
    refused = afc("submit", "manifest.yaml")
    assert refused.returncode == 2 and "OPENAI_API_KEY" in refused.stderr
    assert afc.rows("SELECT key FROM jobs") == [("a",)]
    assert any("OPENAI_API_KEY" in e for e in afc.json("plan", "manifest.yaml")["environment"])
    fresh = afc("submit", "manifest.yaml", "--ledger", "new.db")
    assert fresh.returncode == 2 and "OPENAI_API_KEY" in fresh.stderr
    assert not (afc.cwd / "new.db").exists()


def test_the_pictures_say_one_avoided_render_in_the_singular(afc):
    """'afc report --html' (and 'afc serve') said 'saved by stored outputs 0.050000 USD, 1
    renders'."""
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    # a second ledger finds the output stored by the first: one render avoided
    assert afc("submit", "manifest.yaml", "--ledger", "other.db").returncode == 0
    assert afc.json("costs", "report", "--ledger", "other.db")["total"]["avoided_renders"] == 1
    result = afc("report", "--html", "report.html", "--ledger", "other.db")
    assert result.returncode == 0, result.stderr
    page = (afc.cwd / "report.html").read_text()
    assert "USD, 1 render</div>" in page and "1 renders" not in page
