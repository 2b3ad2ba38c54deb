"""Outside audit 29c: ``afc costs report --by day`` at a UTC day's boundary, on both engines.

A day is the UTC date of an attempt's start (of an avoided render's moment), and ``--since``
compares those moments with the day's first instant. SQLite's ``date(x, 'unixepoch')`` rounds
``x`` to the millisecond and PostgreSQL's ``to_timestamp`` to the microsecond, so an attempt
started in the last half millisecond of a day was that day's on PostgreSQL and the next day's
on SQLite, where ``--since`` the next day left it out: one ledger copied between engines told
two spends for a day, and a report by day since a date held a day's row that the since left
incomplete. Both now take the day of the whole second the moment is in."""

from __future__ import annotations

import datetime as dt

from conftest import jobs, manifest

from afc_cli.ledger import Ledger

MIDNIGHT = dt.datetime(2026, 11, 2, tzinfo=dt.UTC).timestamp()


def test_a_moment_before_midnight_is_that_days_on_both_engines(afc, ledger_url):
    afc.write_manifest(manifest(jobs(3)))
    assert afc("submit", "manifest.yaml", "--ledger", ledger_url).returncode == 0
    assert afc("submit", "manifest.yaml", "--ledger", ledger_url).returncode == 0  # replays
    moments = {
        "shot-001": MIDNIGHT - 0.0004,  # 23:59:59.9996 on 1 November
        "shot-002": MIDNIGHT - 0.0000004,  # 23:59:59.9999996: a microsecond's rounding away
        "shot-003": MIDNIGHT,  # 00:00:00 on 2 November
    }
    ledger = Ledger(ledger_url)
    try:
        with ledger.tx():
            for key, at in moments.items():
                [job] = ledger.jobs_by_key(key, "b1")
                ledger.db.execute(
                    "UPDATE attempts SET started_at = ? WHERE job_id = ?", (at, job["id"])
                )
                ledger.db.execute("UPDATE avoided SET at = ? WHERE job_id = ?", (at, job["id"]))
    finally:
        ledger.close()

    by_day = afc.json("costs", "report", "--by", "day", "--ledger", ledger_url)
    days = {row["day"]: (row["priced"], row["avoided_renders"]) for row in by_day["rows"]}
    assert days == {"2026-11-01": ("0.100000", 2), "2026-11-02": ("0.050000", 1)}
    since = afc.json(
        "costs", "report", "--by", "day", "--since", "2026-11-02", "--ledger", ledger_url
    )
    assert [(r["day"], r["priced"], r["avoided_renders"]) for r in since["rows"]] == [
        ("2026-11-02", "0.050000", 1)
    ]
