"""``afc serve``'s review queue in headless Chromium: Approve and Reject (with a reason) do
what ``afc review`` does (afc_cli/review.py: ``pending``, ``approve``, ``reject``), and the
ledger shows the decision; a GET to an action address decides nothing, nor does a POST
without the server's form token or a rejection without a reason."""

from __future__ import annotations

import json

import httpx
import pytest
from browser import Served, browser, ledger_state  # noqa: F401 - fixture
from conftest import jobs, manifest

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")
pytest.importorskip("afc_cli.review", reason="needs the review gates (afc_cli/review.py, issue 17)")


def awaiting(afc, n: int = 3) -> None:
    """``n`` jobs rendered, stored and awaiting review (``review: true``)."""
    data = manifest(jobs(n, size="96x64"))
    data["defaults"]["review"] = True
    afc.write_manifest(data)
    afc("submit", "manifest.yaml")
    statuses = dict(afc.rows("SELECT key, status FROM jobs"))
    assert set(statuses.values()) == {"awaiting_review"}, statuses


def status(afc, key: str) -> str:
    return afc.rows("SELECT status FROM jobs WHERE key = ?", (key,))[0][0]


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

        browser.find_element(By.CSS_SELECTOR, "figure[data-key=shot-001] button.approve").click()
        flash = browser.find_element(By.CSS_SELECTOR, ".flash").text
        assert flash == "shot-001: approved."
        card = browser.find_element(By.CSS_SELECTOR, "figure[data-key=shot-002]")
        card.find_element(By.NAME, "reason").send_keys("horizon is tilted")
        card.find_element(By.CSS_SELECTOR, "button.reject").click()
        assert browser.find_element(By.CSS_SELECTOR, ".flash").text == "shot-002: rejected."
        left = browser.find_elements(By.CSS_SELECTOR, ".review figure[data-key]")
        assert [c.get_attribute("data-key") for c in left] == ["shot-003"]
    finally:
        code, _ = served.stop()
    assert code == 0
    assert status(afc, "shot-001") == "succeeded"
    assert status(afc, "shot-002") == "rejected"
    assert status(afc, "shot-003") == "awaiting_review"
    story = json.dumps(afc.json("show", "shot-002"))
    assert "horizon is tilted" in story and "(afc serve)" in story


def test_a_get_to_an_action_url_decides_nothing(afc):
    awaiting(afc, 1)
    before = ledger_state(afc.cwd / "afc.db")
    served = Served(afc)
    try:
        page = httpx.get(served.url + "review").text
        token = page.split('name="form_token" value="', 1)[1].split('"', 1)[0]
        for action in ("approve", "reject"):
            query = {"key": "shot-001", "batch": "b1", "reason": "no", "form_token": token}
            assert httpx.get(f"{served.url}review/{action}", params=query).status_code == 405
        forged = httpx.post(
            served.url + "review/approve",
            data={"key": "shot-001", "batch": "b1", "form_token": token[:-1]},
        )
        assert forged.status_code == 403
        no_reason = httpx.post(
            served.url + "review/reject",
            data={"key": "shot-001", "batch": "b1", "form_token": token, "reason": " "},
        )
        assert no_reason.status_code == 409 and "needs a reason" in no_reason.text
        unknown = httpx.post(
            served.url + "review/approve",
            data={"key": "no-such-key", "batch": "b1", "form_token": token},
        )
        assert unknown.status_code == 409 and "no-such-key" in unknown.text
    finally:
        code, _ = served.stop()
    assert code == 0
    assert ledger_state(afc.cwd / "afc.db") == before
    assert status(afc, "shot-001") == "awaiting_review"
