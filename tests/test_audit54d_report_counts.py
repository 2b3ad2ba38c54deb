"""Outside audit 54d: the line ``afc report --html`` writes on stderr counts the jobs by
status as ``afc status`` and the report's own header do.

It said ``2 failed`` for a batch of one failed and one dead-lettered job: the report's
failures are both (README, "Pictures"), but beside ``afc status`` (``1 failed, 1 dead``), the
header of the page it wrote and ``afc queue stats`` (``failed 1``, ``dlq 1``) a producer read
two failed jobs where one was dead-lettered, which ``afc retry --failed`` does not queue."""

from __future__ import annotations

import signal
import time

from conftest import manifest


def test_the_report_line_counts_dead_jobs_apart_from_failed_ones(afc):
    afc.write_manifest(
        manifest(
            [
                {"key": "slow", "prompt": "slow one", "params": {"latency_s": 60}},
                {"key": "fine", "prompt": "fine one"},
                {"key": "bad", "prompt": "bad one", "params": {"fail": ["refusal"] * 3}},
            ]
        )
    )
    afc.env["AFC_MAX_INTERRUPTS"] = "1"
    # the slow job's call cut off by a killed run: the next run dead-letters it (crash loop)
    proc = afc.popen("submit", "manifest.yaml")
    deadline = time.time() + 60
    sql = "SELECT COUNT(*) FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE j.key = 'slow'"
    # and the other two ended first: a kill that cut 'fine's call off too left it
    # 'unknown', and the resume dead-lettered it as well (failed in a loaded full run)
    ended = "SELECT COUNT(*) FROM jobs WHERE key IN ('fine', 'bad') AND status IN ('succeeded', 'failed')"
    while not ((afc.cwd / "afc.db").exists() and _count(afc, sql) and _count(afc, ended) == 2):
        assert time.time() < deadline and proc.poll() is None, "the slow call never started"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    afc("resume")
    counts = afc.json("status", "--all")["counts"]
    assert counts == {"succeeded": 1, "failed": 1, "dead": 1}, counts

    result = afc("report", "--html", "r.html")
    assert result.returncode == 0, result.stderr
    assert "1 failed, 1 dead, 0 awaiting review" in result.stderr, result.stderr
    summary = afc.json("report", "--html", "r.html")
    assert summary["failures"] == 2 and summary["dead"] == 1, summary


def _count(afc, sql: str) -> int:
    try:
        return afc.rows(sql)[0][0]
    except Exception:  # the schema may still be in the making
        return 0
