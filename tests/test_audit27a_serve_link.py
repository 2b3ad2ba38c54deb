"""Outside audit 27a: a link to afc serve's review page, followed from another site."""

from __future__ import annotations

import pytest
from browser import Served, after_click, awaiting, browser, status  # noqa: F401 - the browser fixture

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")


def test_a_link_from_another_site_opens_the_page_once_the_token_was_given(afc, browser):  # noqa: F811
    """The token's cookie was SameSite=Strict, which a browser does not send on a navigation
    that comes from another site: a reviewer who had opened the server with its token, then
    followed a link to its review page from a chat message, a ticket or a mail (how a studio
    says "please review"), met 401 'needs its token' every time, and was pushed to share the
    address with ?token= in it. The cookie is SameSite=Lax: sent on a link followed, never on
    another site's POST (and a decision needs this server's form token besides)."""
    from selenium.webdriver.common.by import By

    awaiting(afc, 1)
    token = "team-review-secret-" + "q" * 12
    served = Served(afc, env={"AFC_SERVE_TOKEN": token})
    try:
        browser.get(f"{served.url}review?token={token}")
        assert browser.find_elements(By.CSS_SELECTOR, ".review figure[data-key=shot-001]")
        # another site's page with a link to the review page (its origin opaque: cross-site)
        browser.get(f"data:text/html,<a id=go href='{served.url}review'>review</a>")
        after_click(browser, browser.find_element(By.ID, "go"))
        assert "needs its token" not in browser.page_source
        assert browser.find_elements(By.CSS_SELECTOR, ".review figure[data-key=shot-001]")
        # another site's POST carries no cookie: refused even with this server's form token
        # (which no other site can read)
        form_token = browser.find_element(By.NAME, "form_token").get_attribute("value")
        browser.get(
            f"data:text/html,<form method=post action='{served.url}review/approve'>"
            f"<input name=form_token value='{form_token}'><input name=key value=shot-001>"
            "<input name=batch value=b1><button id=go>go</button></form>"
        )
        after_click(browser, browser.find_element(By.ID, "go"))
        assert "needs its token" in browser.page_source
    finally:
        code, stderr = served.stop()
    assert code == 0 and token not in stderr
    assert status(afc, "shot-001") == "awaiting_review"
