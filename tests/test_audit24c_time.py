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
