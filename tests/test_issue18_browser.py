"""The pictures in a real browser (headless Chromium through selenium): the report file,
``afc serve``'s pages and its review queue, against ledgers made by real ``afc submit`` runs.

Without Debian's chromium and chromium-driver the whole module skips, with one line saying
how to get them (``.ci/run`` installs them, so CI runs it)."""

from __future__ import annotations

import json

import httpx
import pytest
from browser import (  # noqa: F401
    LOADED_IMAGES,
    SKIP,
    Served,
    after_click,
    available,
    awaiting,
    browser,
    ledger_state,
    status,
)
from conftest import jobs, manifest

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")
if not available():
    pytest.skip(SKIP, allow_module_level=True)


def batch_with_a_failure(afc, n: int) -> list[dict]:
    """``n`` stored outputs and one failed job; the outputs as ``afc outputs`` lists them."""
    listed = jobs(n, size="96x64")
    listed.append({"key": "broken", "prompt": "refused", "params": {"fail": ["refusal"] * 3}})
    afc.write_manifest(manifest(listed))
    assert afc("submit", "manifest.yaml").returncode == 1
    return afc.json("outputs")["outputs"]


def loaded(driver) -> dict[str, int]:
    return {alt: width for alt, width in driver.execute_async_script(LOADED_IMAGES)}


def test_the_report_shows_every_stored_output_and_the_costs_reports_totals(afc, browser):  # noqa: F811
    outputs = batch_with_a_failure(afc, 230)  # two pages of the contact sheet
    written = afc.json("report", "--html", "report.html")
    # the file holds a picture for every stored output (a shortfall here is the report's, not
    # the browser's)
    assert written["without_picture"] == [] and written["pictures"] == len(outputs), written
    browser.get((afc.cwd / "report.html").as_uri())
    images = loaded(browser)
    # every stored output is a loaded picture (on either page), and only those
    assert set(images) == {o["key"] for o in outputs}
    assert all(width > 0 for width in images.values()), images
    from selenium.webdriver.common.by import By

    total = afc.json("costs", "report")["total"]
    shown = {
        el.get_attribute("data-figure"): el.text
        for el in browser.find_elements(By.CSS_SELECTOR, "[data-figure]")
    }
    assert shown == {
        name: str(total[name])
        for name in (
            "priced",
            "failed_spend",
            "avoided_cost",
            "unpriced_attempts",
            "unknown_attempts",
        )
    }
    for by in ("provider", "model", "day"):
        report = afc.json("costs", "report", "--by", by)["total"]
        cells = browser.find_elements(By.CSS_SELECTOR, f"table[data-by={by}] [data-total]")
        assert {c.get_attribute("data-total"): c.get_attribute("textContent") for c in cells} == {
            k: str(v) for k, v in report.items()
        }
    # the pager: page 2 holds the cards past the first 200, shown when its button is pressed
    card = browser.find_element(By.CSS_SELECTOR, "figure[data-key=shot-230]")
    assert not card.is_displayed()
    browser.find_element(By.CSS_SELECTOR, ".pager button[data-page='2']").click()
    assert card.is_displayed()
    failed = browser.find_element(By.CSS_SELECTOR, "table.failures tr[data-key=broken]")
    assert "CHAIN_FAILED" in failed.text


def test_serve_shows_the_same_views_live_and_streams_full_size_outputs(afc, browser):  # noqa: F811
    from selenium.webdriver.common.by import By

    outputs = batch_with_a_failure(afc, 5)
    served = Served(afc)
    try:
        browser.get(served.url)
        images = loaded(browser)
        assert set(images) == {o["key"] for o in outputs} and all(images.values())
        link = browser.find_element(By.CSS_SELECTOR, "figure[data-key=shot-003] a")
        href = link.get_attribute("href")
        browser.get(href)  # the full-size picture, from storage
        assert browser.execute_script("return document.images[0].naturalWidth") == 96
        full = httpx.get(href)
        with open(next(o["path"] for o in outputs if o["key"] == "shot-003"), "rb") as f:
            assert full.content == f.read() and full.headers["content-type"] == "image/png"

        browser.get(served.url + "spend")
        total = afc.json("costs", "report")["total"]
        assert browser.find_element(By.CSS_SELECTOR, "[data-figure=priced]").text == total["priced"]
        browser.get(served.url + "failures")
        assert "CHAIN_FAILED" in browser.find_element(By.CSS_SELECTOR, "tr[data-key=broken]").text
    finally:
        code, stderr = served.stop()
    assert code == 0 and "serve stopped" in stderr and "Traceback" not in stderr


def test_approve_and_reject_in_the_browser_and_the_ledger_shows_the_decisions(afc, browser):  # noqa: F811
    from selenium.webdriver.common.by import By

    awaiting(afc, 3)
    served = Served(afc)
    try:
        browser.get(served.url + "review")
        cards = browser.find_elements(By.CSS_SELECTOR, ".review figure[data-key]")
        keys = [c.get_attribute("data-key") for c in cards]  # the oldest first
        assert sorted(keys) == ["shot-001", "shot-002", "shot-003"]
        widths = browser.execute_script(
            "return Array.from(document.images).map(i => i.complete && i.naturalWidth)"
        )
        assert all(widths), widths  # each thumbnail loaded from storage

        after_click(
            browser,
            browser.find_element(By.CSS_SELECTOR, "figure[data-key=shot-001] button.approve"),
        )
        flash = browser.find_element(By.CSS_SELECTOR, ".flash").text
        assert flash == "shot-001: approved."
        card = browser.find_element(By.CSS_SELECTOR, "figure[data-key=shot-002]")
        card.find_element(By.NAME, "reason").send_keys("horizon is tilted")
        after_click(browser, card.find_element(By.CSS_SELECTOR, "button.reject"))
        assert browser.find_element(By.CSS_SELECTOR, ".flash").text == "shot-002: rejected."
        left = browser.find_elements(By.CSS_SELECTOR, ".review figure[data-key]")
        assert [c.get_attribute("data-key") for c in left] == ["shot-003"]
        assert status(afc, "shot-003") == "awaiting_review"
        # the page's own cards, approved at once (their batch and key sent by the form)
        shown = browser.find_element(By.CSS_SELECTOR, "button.approve-shown")
        assert shown.text == "Approve the 1 shown"
        after_click(browser, shown)
        assert browser.find_element(By.CSS_SELECTOR, ".flash").text == "1 job: approved."
        assert not browser.find_elements(By.CSS_SELECTOR, ".review figure[data-key]")
    finally:
        code, _ = served.stop()
    assert code == 0
    assert status(afc, "shot-001") == "succeeded"
    assert status(afc, "shot-002") == "rejected"
    assert status(afc, "shot-003") == "succeeded"
    story = json.dumps(afc.json("show", "shot-002"))
    assert "horizon is tilted" in story and "(afc serve)" in story
