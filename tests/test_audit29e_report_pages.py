"""Outside audit 29e: ``afc report --html`` written as the ledger is read, while a run writes.

The contact sheet's pager was laid out from the scope's count (``sheet_counts``), read before
its cards (``Ledger.sheet_chunks``, streamed a page at a time). A job entering the scope in
between (a job of a running batch finishing inside ``--since``'s window, a manifest grown by
another ``afc submit``) made a 201st card under a count of 200: the file held a second page,
but no pager to reach it (a page not current is hidden), so that card was in the file and
could not be seen. The pager is built from the pages the file holds."""

from __future__ import annotations

import sqlite3
import time

import pytest
from browser import SKIP, available, browser  # noqa: F401
from conftest import jobs, manifest

from afc_cli.ledger import Ledger

pytest.importorskip("jinja2", reason="the web extra: pip install 'afc-cli[web]'")
if not available():
    pytest.skip(SKIP, allow_module_level=True)


def test_a_card_that_entered_the_scope_while_read_can_be_seen(afc, browser, monkeypatch):  # noqa: F811
    from selenium.webdriver.common.by import By

    from afc_cli.web.html import write_report

    afc.write_manifest(manifest(jobs(201, size="16x16")))
    assert afc("submit", "manifest.yaml", "-q").returncode == 0
    db = afc.cwd / "afc.db"
    conn = sqlite3.connect(db)
    with conn:  # outside --since's window when the report counts its jobs
        conn.execute("UPDATE jobs SET updated_at = 0 WHERE key = 'shot-201'")
    original = Ledger.sheet_chunks

    def finished_meanwhile(self, **scope):
        with conn:  # what a running batch does: the job's row is written again, now
            conn.execute("UPDATE jobs SET updated_at = ? WHERE key = 'shot-201'", (time.time(),))
        yield from original(self, **scope)

    monkeypatch.setattr(Ledger, "sheet_chunks", finished_meanwhile)
    made = write_report(str(db), str(afc.cwd / "r.html"), batch=None, since="2020-01-01")
    conn.close()
    assert made["jobs"] == 201  # the card is in the file
    browser.get((afc.cwd / "r.html").as_uri())
    sheet = browser.find_element(By.CSS_SELECTOR, "#sheet + .paged")
    card = sheet.find_element(By.CSS_SELECTOR, 'figure[data-key="shot-201"]')
    assert not card.is_displayed()  # on the second page
    buttons = sheet.find_elements(By.CSS_SELECTOR, ".pager button")
    assert [b.text for b in buttons] == ["1", "2"]  # it had no pager: the card out of reach
    buttons[1].click()
    assert card.is_displayed()
