"""Outside audit 27a: "Approve the N shown" on afc serve's review page approves the pictures a
reviewer saw, and no other."""

from __future__ import annotations

import html
import re
from urllib.parse import urlencode

import httpx
import pytest
from browser import Served, awaiting, browser, rendered_as, status  # noqa: F401 - the browser fixture

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")


def _form(page: str) -> list[tuple[str, str]]:
    """The approve-shown form's fields, as a browser sends them."""
    form = page.split('class="approve-shown-form"', 1)[1].split("</form>", 1)[0]
    return [
        (name, html.unescape(value))
        for name, value in re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', form)
    ]


def _post(url: str, fields: list[tuple[str, str]]) -> httpx.Response:
    return httpx.post(
        url + "review/approve-shown",
        content=urlencode(fields),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        follow_redirects=True,
    )


def _said(page: str) -> str:
    return " ".join(
        html.unescape(m) for m in re.findall(r'class="flash[^"]*"[^>]*>(.*?)</p>', page, re.S)
    )


def test_approve_the_shown_leaves_the_cards_whose_picture_was_not_shown(afc):
    """The button approved every card of the page, also a card whose picture could not be
    shown (here: its stored bytes no picture; likewise a store out of reach, an output over
    64 MiB, a video): the reviewer approving "what I saw" approved a picture nobody saw. Now
    only the cards whose picture this server sent are approved; the others stay awaiting
    review, and the page says how many and why."""
    awaiting(afc, 3)
    rendered_as(afc, "shot-002", b"not a picture at all")
    served = Served(afc)
    try:
        page = httpx.get(served.url + "review").text
        for src in re.findall(r'<img src="([^"]+)"', page):  # as the browser loads them
            assert httpx.get(httpx.URL(served.url).join(src)).status_code == 200
        done = _post(served.url, _form(page))
        assert done.status_code == 200
        said = _said(done.text)
        assert "2 jobs: approved." in said
        assert "1 job left undecided" in said and "shot-002" in said
        assert "not a picture this afc can preview" in said
        assert 'data-key="shot-002"' in done.text  # still on the queue
    finally:
        code, stderr = served.stop()
    assert code == 0 and "Traceback" not in stderr
    assert status(afc, "shot-001") == status(afc, "shot-003") == "succeeded"
    assert status(afc, "shot-002") == "awaiting_review"


def test_approve_the_shown_approves_nothing_whose_picture_was_never_sent(afc):
    """A page whose pictures did not load (the browser's images off, the store down when it
    was shown, the form posted by a script) showed no picture: nothing is approved, and the
    page says so."""
    awaiting(afc, 2)
    served = Served(afc)
    try:
        page = httpx.get(served.url + "review").text
        done = _post(served.url, _form(page))
        assert done.status_code == 200
        said = _said(done.text)
        assert "0 jobs: approved." in said and "2 jobs left undecided" in said
        assert "not shown" in said
    finally:
        code, _ = served.stop()
    assert code == 0
    assert status(afc, "shot-001") == status(afc, "shot-002") == "awaiting_review"


def test_in_the_browser_the_page_says_which_cards_it_left(afc, browser):  # noqa: F811
    """The same in Chromium: the reviewer sees three cards, one of them a placeholder saying
    its bytes are no picture; Approve the 3 shown approves the two pictures and the page
    says which one it left, and why; that card stays, with its own buttons."""
    from browser import LOADED_IMAGES, after_click
    from selenium.webdriver.common.by import By

    awaiting(afc, 3)
    (afc.outputs() / "b1" / "shot-003.png").write_bytes(b"GIF89a but not really")
    served = Served(afc)
    try:
        browser.get(served.url + "review")
        browser.set_script_timeout(60)
        loaded = dict(browser.execute_async_script(LOADED_IMAGES))
        assert set(loaded) == {"shot-001", "shot-002", "shot-003"} and all(loaded.values())
        after_click(browser, browser.find_element(By.CSS_SELECTOR, "button.approve-shown"))
        flashes = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".flash")]
        assert flashes[0] == "2 jobs: approved."
        assert flashes[1].startswith("1 job left undecided") and "shot-003 (" in flashes[1]
        left = browser.find_elements(By.CSS_SELECTOR, ".review figure[data-key]")
        assert [card.get_attribute("data-key") for card in left] == ["shot-003"]
    finally:
        code, _ = served.stop()
    assert code == 0
    assert status(afc, "shot-001") == status(afc, "shot-002") == "succeeded"
    assert status(afc, "shot-003") == "awaiting_review"
