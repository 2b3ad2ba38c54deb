"""Outside audit 24a: the repository's own words (README, docs/, each command's help) against
what the real ``afc`` command does."""

from __future__ import annotations

import pytest
from conftest import jobs, manifest


def test_a_worker_line_names_its_attempts_of_unknown_cost_apart(afc):
    """README ("A run's spend": unknown cost is shown as unpriced everywhere, never
    as zero): a run's summary gives its priced spend and, apart, its attempts of unknown cost.
    'afc worker' said only 'spent 0.050000 USD (priced)' for a worker whose first call timed
    out (possibly paid, cost unknown), and 'spent 0.000000 USD (priced)' for one whose every
    attempt was unpriced, though its --json counted them in unknown_cost_attempts: a service's
    log read as what it paid."""
    afc.write_manifest(manifest(jobs(1, fail=["timeout"])))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    done = afc("worker", "--until-idle")
    assert done.returncode == 0, done
    assert afc.rows("SELECT status, cost_micros FROM attempts ORDER BY number") == [
        ("failed", None),
        ("succeeded", 50000),
    ]
    assert "spent 0.050000 USD (priced) + 1 attempt of unknown cost" in done.stderr, done.stderr

    # no rate card for the model: every attempt unpriced, none of them said as zero alone
    afc.write_manifest(manifest(jobs(2), batch="b2", rates=[]), "m2.yaml")
    assert afc("submit", "m2.yaml", "--no-run").returncode == 0
    done = afc("worker", "--until-idle")
    assert done.returncode == 0, done
    assert "spent 0.000000 USD (priced) + 2 attempts of unknown cost" in done.stderr, done.stderr
    # and a worker that started no attempt says nothing of them
    done = afc("worker", "--until-idle")
    assert "of unknown cost" not in done.stderr, done.stderr


def test_the_report_line_names_its_attempts_of_unknown_cost_apart(afc):
    """'afc report --html' ends with a line of its counts and spend; it said 'spent 0.000000
    USD (priced)' for a batch whose every attempt was unpriced (no rate card), where 'afc
    costs report' over the same ledger says they are unpriced and real spend is higher, and
    a run's summary adds its attempts of unknown cost: never shown as zero alone (README "Money")."""
    pytest.importorskip("PIL", reason="the web extra: pip install 'afc-cli[web]'")
    afc.write_manifest(manifest(jobs(1, fail=["timeout"]) + [{"key": "x", "prompt": "q"}]))
    assert afc("submit", "manifest.yaml").returncode == 0
    done = afc("report", "--html", "r.html")
    assert done.returncode == 0, done
    assert "spent 0.100000 USD (priced) + 1 attempt of unknown cost" in done.stderr, done.stderr

    afc.write_manifest(manifest(jobs(2), batch="b2", rates=[]), "m2.yaml")
    assert afc("submit", "m2.yaml").returncode == 0
    done = afc("report", "--html", "r.html", "--batch", "b2")
    assert "spent 0.000000 USD (priced) + 2 attempts of unknown cost" in done.stderr, done.stderr
    assert (
        afc.json("report", "--html", "r.html", "--batch", "b2")["total"]["unpriced_attempts"] == 2
    )


def test_status_help_names_every_status_it_lists_without_all(afc):
    """'afc status -h' and README said the jobs that need attention are the failed,
    dead-lettered, waiting and running ones; 'afc status' lists every job but the succeeded,
    queued and cancelled ones (listing.QUIET), so a style frame awaiting review, the shots
    blocked behind it and a rejected job are listed too: a person who read the help took the
    rows for a bug, or a script that counted the rows took the review queue for failures."""
    data = manifest(
        [
            {"key": "frame", "prompt": "style", "review": True},
            {"key": "shot", "prompt": "shot", "needs": ["frame"]},
            {"key": "other", "prompt": "other", "review": True},
        ]
    )
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    assert afc("review", "reject", "other", "--reason", "no").returncode == 0
    rows = afc("status").stdout.splitlines()
    assert rows[0].split("\t")[:2] == ["key", "status"]
    listed = {line.split("\t")[1] for line in rows[1:]}
    assert listed == {"awaiting_review", "blocked", "rejected"}, rows
    said = " ".join(afc("status", "-h").stdout.split())
    for status in ("awaiting review", "blocked", "rejected"):
        assert status in said, said


def test_worker_claim_help_gives_its_default_as_it_is(afc):
    """'afc worker -h' said --claim defaults to 4 x concurrency; it is that, at least 32
    (README, Workers): '--concurrency 1' claims 32 a round, not 4, so ten jobs are one round."""
    afc.write_manifest(manifest(jobs(10)))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    done = afc.json("worker", "--until-idle", "--concurrency", "1")
    assert (done["rounds"], done["claimed"]) == (1, 10), done
    said = " ".join(afc("worker", "-h").stdout.split())
    assert "(default 4 x concurrency, at least 32)" in said, said


def test_resume_help_says_which_failed_jobs_it_exits_1_for(afc):
    """'afc resume -h' said it exits 1 while a job of its scope is failed; after a rejection
    the jobs that needed the rejected one are failed DEPENDENCY_FAILED and 'afc resume' exits
    0 for them, as README's exit codes say (a person's decision, which no retry clears): the
    help now says that exception as 'afc queue stats -h' does."""
    afc.write_manifest(
        manifest(
            [
                {"key": "frame", "prompt": "style", "review": True},
                {"key": "shot", "prompt": "shot", "needs": ["frame"]},
            ]
        )
    )
    assert afc("submit", "manifest.yaml").returncode == 0
    assert afc("review", "reject", "frame", "--reason", "no").returncode == 0
    assert afc.rows("SELECT status, error_code FROM jobs WHERE key = 'shot'") == [
        ("failed", "DEPENDENCY_FAILED")
    ]
    assert afc("resume").returncode == 0
    said = " ".join(afc("resume", "-h").stdout.split())
    assert "not one failed only because a job it needs was rejected or cancelled" in said, said


def test_cancel_help_says_a_batch_cancel_leaves_a_review_to_its_reviewer(afc):
    """'afc cancel -h' said '--batch' cancels every unfinished job of the batch; a job awaiting
    review (neither active nor ended) is left to its review, by design (ops.cancel), while a
    blocked one is cancelled: after 'afc cancel --batch B --yes' a reviewer could still
    approve the frame, its job.succeeded sent. The help and README now say which."""
    afc.write_manifest(
        manifest(
            [
                {"key": "frame", "prompt": "style", "review": True},
                {"key": "shot", "prompt": "shot", "needs": ["frame"]},
            ]
        )
    )
    assert afc("submit", "manifest.yaml").returncode == 0
    done = afc.json("cancel", "--batch", "b1", "--yes")
    assert [job["key"] for job in done["cancelled"]] == ["shot"]
    assert afc.rows("SELECT key, status FROM jobs ORDER BY key") == [
        ("frame", "awaiting_review"),
        ("shot", "cancelled"),
    ]
    said = " ".join(afc("cancel", "-h").stdout.split())
    assert "one awaiting review is left to its review" in said, said
