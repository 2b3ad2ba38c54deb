"""Audit 24c: time. Leases, pauses and clocks that differ between the hosts of one ledger,
through the real ``afc`` command; clocks shifted in a child ``afc`` as tests/test_audit_clock.py
does (its ``sitecustomize``)."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import jobs, manifest
from test_audit_clock import shifted as _shifted


def shifted(afc, **files: Path) -> dict[str, str]:
    """test_audit_clock's ``shifted``, keeping the suite's PYTHONPATH after the
    ``sitecustomize``'s folder (its own replaces it: a child run so imports the installed
    afc, not the one under test)."""
    env = _shifted(afc, **files)
    inherited = afc.env.get("PYTHONPATH") or os.environ.get("PYTHONPATH")
    if inherited:
        env["PYTHONPATH"] += os.pathsep + inherited
    return env


def test_queue_and_review_ages_on_postgres_are_on_the_ledgers_clock(afc, pg_url):
    """Two hosts share a PostgreSQL ledger; the one that admits and renders the jobs has a
    clock 20 minutes behind. ``afc queue stats`` on the other gave ``oldest_age_seconds`` (and
    ``oldest_review_age_seconds``, and ``afc review list``'s ``age_s``) of about 1200 for jobs
    admitted and rendered a moment ago: their dates were the admitting host's clock, the ages
    this host's, so cron's ``--fail-if 'oldest_age_seconds>600'`` fired at once; with the
    clocks the other way round a stale backlog read 20 minutes young. Both are on the
    ledger's clock (the server's), as leases and attempts are."""
    afc.write_manifest(manifest(jobs(1) + [{"key": "hero", "prompt": "hero", "review": True}]))
    behind = afc.cwd / "wall-behind"
    behind.write_text("-1200")
    lagging = shifted(afc, wall=behind)
    admitted = afc("submit", "manifest.yaml", "--no-run", "--ledger", pg_url, env=lagging)
    assert admitted.returncode == 0, admitted.stderr
    stats = afc.json("queue", "stats", "--ledger", pg_url)
    assert stats["queued"] == 2
    assert stats["oldest_age_seconds"] < 60, stats
    ahead = afc.cwd / "wall-ahead"
    ahead.write_text("1200")
    stats = afc.json("queue", "stats", "--ledger", pg_url, env=shifted(afc, wall=ahead))
    assert stats["oldest_age_seconds"] < 60, stats

    ran = afc("resume", "--ledger", pg_url, env=lagging)
    assert ran.returncode == 0, ran.stderr
    stats = afc.json("queue", "stats", "--ledger", pg_url)
    assert stats["awaiting_review"] == 1
    assert stats["oldest_review_age_seconds"] < 60, stats
    listed = afc.json("review", "list", "--ledger", pg_url)["awaiting_review"]
    assert [row["key"] for row in listed] == ["hero"]
    assert listed[0]["age_s"] < 60, listed


def test_a_resume_does_not_wait_for_ever_on_a_job_row_a_stopped_process_holds(afc, pg_url):
    """A worker on host-a stopped (SIGSTOP, its laptop's lid closed, its VM paused) in the
    middle of its group transaction keeps that transaction, and the row locks of the jobs it
    wrote in it, open on the PostgreSQL server; their leases run out. 'afc resume' on another
    host came to such a job, found its lease expired and waited for the row's lock to take it
    over, with no bound: it stopped there, its other jobs not run, its event loop blocked, so
    the leases of the jobs it held lapsed for other hosts to take over and pay for again.
    The stopped worker's open transaction is stood for by the test's own session holding the
    row's lock. The job is left to the process that holds it, as a live run's is."""
    import psycopg

    afc.write_manifest(manifest(jobs(2)))
    admitted = afc("submit", "manifest.yaml", "--no-run", "--ledger", pg_url)
    assert admitted.returncode == 0, admitted.stderr
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE jobs SET status = 'running', lease_owner = 'host-a:4242:1',"
            " lease_expires = EXTRACT(EPOCH FROM now()) - 60 WHERE key = 'shot-002'"
        )
    stopped = psycopg.connect(pg_url)  # host-a's transaction, open while it is stopped
    try:
        stopped.execute("SELECT 1 FROM jobs WHERE key = 'shot-002' FOR UPDATE")
        resumed = afc("resume", "--ledger", pg_url, env={"AFC_LEASE_S": "3"}, timeout=30)
    finally:
        stopped.rollback()
        stopped.close()
    assert resumed.returncode == 1, resumed.stderr  # shot-002 still unfinished
    assert "b1/shot-001: ended succeeded" in resumed.stderr
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT key, status, lease_owner FROM jobs ORDER BY key").fetchall()
    assert rows == [("shot-001", "succeeded", None), ("shot-002", "running", "host-a:4242:1")]


def test_a_job_another_host_holds_is_said_so_on_a_host_whose_clock_runs_ahead(afc, pg_url):
    """A run that leaves a job alone because another host's live run holds it says so ("being
    run by another afc process (pid ... on host-a)"). It read the lease against this host's
    clock, where the lease is the database server's: on a host 20 minutes ahead of the
    server, another host's live lease read as expired, and the run said only "running at
    probe", as of a job it had left for no reason, though the claim (on the server's clock)
    had found it held."""
    import psycopg

    afc.write_manifest(manifest(jobs(2)))
    admitted = afc("submit", "manifest.yaml", "--no-run", "--ledger", pg_url)
    assert admitted.returncode == 0, admitted.stderr
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE jobs SET status = 'running', lease_owner = 'host-a:4242:1',"
            " lease_expires = EXTRACT(EPOCH FROM now()) + 600 WHERE key = 'shot-002'"
        )
    ahead = afc.cwd / "wall-ahead"
    ahead.write_text("1200")
    resumed = afc("resume", "--ledger", pg_url, env=shifted(afc, wall=ahead))
    assert resumed.returncode == 1, resumed.stderr  # shot-002 is not finished
    assert "b1/shot-001: ended succeeded" in resumed.stderr
    assert "being run by another afc process (pid 4242 on host-a)" in resumed.stderr, resumed.stderr


def test_a_render_avoided_on_a_lagging_host_counts_since_when_it_was_avoided(afc, pg_url):
    """``afc costs report --since`` counts an attempt from its start on the ledger's clock
    and an avoided render from when it was avoided; the avoided render was dated by the host
    that found the output in storage, by its own clock: a host 20 minutes behind the server
    of a shared PostgreSQL ledger dated a render it avoided a moment ago 20 minutes back, and
    a report since 10 minutes ago left it out (near midnight UTC, ``--by day`` put it on the
    day before)."""
    import datetime as dt

    afc.write_manifest(manifest(jobs(1)))
    stored = afc("submit", "manifest.yaml", "--ledger", str(afc.cwd / "first.db"))
    assert stored.returncode == 0, stored.stderr  # the output is in storage
    behind = afc.cwd / "wall-behind"
    behind.write_text("-1200")
    found = afc("submit", "manifest.yaml", "--ledger", pg_url, env=shifted(afc, wall=behind))
    assert found.returncode == 0, found.stderr
    since = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=10)).isoformat(timespec="seconds")
    report = afc.json("costs", "report", "--since", since, "--ledger", pg_url)
    assert report["total"]["avoided_renders"] == 1, report
