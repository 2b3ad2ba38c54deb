"""Outside audit 43b: the pictures (``afc serve``, ``afc report --html``) of a ledger whose
work ``afc ledger copy`` moved away, or of a copy it did not finish; and a decision posted
while serve cannot open its ledger."""

from __future__ import annotations

import json
import sqlite3

import httpx
import pytest
from browser import Served, awaiting, status
from conftest import jobs, manifest

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")


def test_the_pages_of_a_moved_ledger_say_where_its_work_went(afc):
    """``afc status``, ``afc review list`` and ``afc costs report`` of a moved ledger say
    where its work went; ``afc serve`` showed its review queue as ever (3 jobs awaiting
    review, an Approve button on each and "Approve the 3 shown"), every click then refused
    with "was moved": a reviewer learnt it only by deciding, and its contact sheet showed
    jobs no run here takes. Every page now says it under its header; a decision is still
    refused, nothing decided."""
    awaiting(afc, 3)
    copied = afc("ledger", "copy", "afc.db", "moved.db")
    assert copied.returncode == 0, copied.stderr
    served = Served(afc)
    try:
        for path in ("", "failures", "review", "spend"):
            page = httpx.get(served.url + path)
            assert page.status_code == 200, path
            assert "this ledger was moved to" in page.text, path
            assert "moved.db" in page.text, path
        page = httpx.get(served.url + "review").text
        token = page.split('name="form_token" value="', 1)[1].split('"', 1)[0]
        refused = httpx.post(
            served.url + "review/approve",
            data={"key": "shot-001", "batch": "b1", "form_token": token},
        )
        assert refused.status_code == 409
        assert "was moved to" in refused.text
    finally:
        code, _ = served.stop()
    assert code == 0
    assert status(afc, "shot-001") == "awaiting_review"


def test_the_pages_of_an_unfinished_copy_say_so(afc):
    """A copy 'afc ledger copy' did not finish (killed between its two commits) runs
    nothing while its source runs on: its pages say so, not the jobs' state as if it were
    the batch's."""
    awaiting(afc, 1)
    conn = sqlite3.connect(afc.cwd / "afc.db")
    with conn:
        conn.execute(
            "INSERT INTO ledger_moves (destination, moved_at) VALUES (?, 0)",
            ("nowhere yet: it is an unfinished copy of /srv/old.db",),
        )
    conn.close()
    served = Served(afc)
    try:
        page = httpx.get(served.url + "review")
        assert "a copy of /srv/old.db that &#39;afc ledger copy&#39; did not finish" in page.text
    finally:
        served.stop()


def test_the_report_of_a_moved_ledger_says_where_its_work_went(afc):
    """``afc report --html`` of a moved ledger (a cron's nightly report left on the old
    path) mailed a producer its jobs awaiting review as if nobody could have decided them
    since: the file, stderr and --json now say where the work went."""
    awaiting(afc, 2)
    assert afc("ledger", "copy", "afc.db", "moved.db").returncode == 0
    made = afc("report", "--html", "report.html")
    assert made.returncode == 0, made.stderr
    assert "this ledger was moved to" in made.stderr and "moved.db" in made.stderr
    text = (afc.cwd / "report.html").read_text()
    assert "this ledger was moved to" in text and "moved.db" in text
    result = json.loads(afc("report", "--html", "report.html", "--json").stdout)
    assert result["moved_to"].endswith("moved.db")
    # the new ledger's own report says nothing of the kind
    fresh = afc("report", "--html", "new.html", "--ledger", "moved.db")
    assert fresh.returncode == 0, fresh.stderr
    assert "moved to" not in (afc.cwd / "new.html").read_text()


def test_a_decision_whose_ledger_cannot_be_opened_says_nothing_was_decided(afc):
    """A decision posted while serve could not open its ledger (moved away, its PostgreSQL
    server restarting) was the 409 page of a refused decision, the ledger's error alone:
    it did not say whether anything was decided. It is the 503 the README promises for a
    decision the ledger cannot take: nothing was decided, decide again once it answers."""
    awaiting(afc, 2)
    served = Served(afc)
    try:
        page = httpx.get(served.url + "review").text
        token = page.split('name="form_token" value="', 1)[1].split('"', 1)[0]
        (afc.cwd / "afc.db").rename(afc.cwd / "away.db")
        answers = [
            httpx.post(served.url + path, data={**data, "form_token": token})
            for path, data in (
                ("review/approve", {"key": "shot-001", "batch": "b1"}),
                ("review/reject", {"key": "shot-001", "batch": "b1", "reason": "too dark"}),
                ("review/approve-shown", {"batch": ["b1"] * 2, "key": ["shot-001", "shot-002"]}),
            )
        ]
        for answer in answers:
            assert answer.status_code == 503, (answer.request.url, answer.status_code)
            assert "no ledger at afc.db" in answer.text
            assert "nothing was decided" in answer.text
        (afc.cwd / "away.db").rename(afc.cwd / "afc.db")
    finally:
        code, stderr = served.stop()
    assert code == 0 and "Traceback" not in stderr
    assert status(afc, "shot-001") == status(afc, "shot-002") == "awaiting_review"


def test_a_decision_on_a_postgresql_ledger_that_refuses_connections_is_a_503(afc, pg_url):
    """The same on PostgreSQL: a database that takes no connection (a server restarting, a
    maintenance window) is 'nothing was decided', 503, not a refusal."""
    import psycopg

    data = manifest(jobs(2, size="32x32"))
    data["defaults"]["review"] = True
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", "--ledger", pg_url).returncode == 0
    served = Served(afc, "--ledger", pg_url)
    name = pg_url.rsplit("/", 1)[1]
    admin = pg_url.rsplit("/", 1)[0] + "/postgres"
    try:
        page = httpx.get(served.url + "review").text
        token = page.split('name="form_token" value="', 1)[1].split('"', 1)[0]
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
        try:
            for path, data in (
                ("review/approve", {"key": "shot-001", "batch": "b1"}),
                ("review/approve-shown", {"batch": ["b1"] * 2, "key": ["shot-001", "shot-002"]}),
            ):
                answer = httpx.post(served.url + path, data={**data, "form_token": token})
                assert answer.status_code == 503, (path, answer.text[-400:])
                assert "nothing was decided" in answer.text
        finally:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")
        assert httpx.get(served.url + "review").status_code == 200
    finally:
        code, stderr = served.stop()
    assert code == 0 and "Traceback" not in stderr
