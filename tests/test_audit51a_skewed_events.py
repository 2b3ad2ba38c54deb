"""Outside audit 51a: a webhook's ``timestamp`` on a shared PostgreSQL ledger is on the
ledger's clock (the database server's), whichever host's clock wrote the event."""

from __future__ import annotations

import json

from conftest import manifest
from test_audit_clock import shifted

HOOK = {"url": "http://127.0.0.1:9/hooks/afc", "secret_env": "HOOK_SECRET"}
SECRET = {"HOOK_SECRET": "whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0"}


def _envelopes(pg_url: str) -> dict[str, dict]:
    import psycopg

    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT event, envelope FROM deliveries").fetchall()
    return {event: json.loads(envelope) for event, envelope in rows}


def test_an_approval_on_a_host_whose_clock_is_behind_is_the_latest_event(afc, pg_url):
    """README: events of one job may arrive out of order, 'so a receiver keeps the latest by
    [timestamp]'. A job's ``job.awaiting_review`` is dated on the ledger's clock, but its
    ``job.succeeded`` (the approval) and any ending were dated by the writing host's wall
    clock alone: approved within ten minutes from a laptop ten minutes behind the database,
    the approval's event was dated before the one it followed, and a receiver keeping the
    latest by it kept 'awaiting review' for a job already approved (its reviewer paged
    again, its shot never picked up)."""
    afc.env["AFC_LEDGER"] = pg_url
    afc.write_manifest(
        manifest([{"key": "style", "prompt": "the style frame", "review": True}], webhook=HOOK)
    )
    run = afc("submit", "manifest.yaml", env=SECRET)
    assert run.returncode == 0, run.stderr
    behind = afc.cwd / "wall-shift"
    behind.write_text("-600")  # the reviewer's laptop, ten minutes behind the server
    approved = afc("review", "approve", "style", env={**SECRET, **shifted(afc, wall=behind)})
    assert approved.returncode == 0, approved.stderr
    said = _envelopes(pg_url)
    assert said["job.succeeded"]["timestamp"] > said["job.awaiting_review"]["timestamp"], said


def test_an_ending_on_a_host_whose_clock_is_behind_is_dated_on_the_ledgers_clock(afc, pg_url):
    """A job ended by a worker whose clock is ten minutes behind the database's: its
    ``job.succeeded`` was dated ten minutes before it happened, before the events other
    hosts wrote of the same job a moment earlier, and its ``finished_at`` likewise."""
    import datetime as dt
    import time

    afc.env["AFC_LEDGER"] = pg_url
    afc.write_manifest(manifest([{"key": "plain", "prompt": "a plain shot"}], webhook=HOOK))
    behind = afc.cwd / "wall-shift"
    behind.write_text("-600")
    before = time.time()
    run = afc("submit", "manifest.yaml", env={**SECRET, **shifted(afc, wall=behind)})
    assert run.returncode == 0, run.stderr
    stamp = _envelopes(pg_url)["job.succeeded"]["timestamp"]
    when = dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
    # the test's host and the database server share a clock; allow a second for sampling
    assert when.timestamp() > before - 1, (stamp, before)
    shown = afc.json("show", "plain")

    def at(iso: str) -> float:
        return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()

    # whole seconds in afc show: a second more of slack
    assert at(shown["job"]["finished_at"]) > before - 2, (shown["job"], before)
    # and the steps and events afc show lists beside its attempts
    for row in shown["steps"] + shown["events"]:
        assert at(row["at"]) > before - 2, (row, before)
