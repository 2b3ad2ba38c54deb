"""Outside audit 26c: ``afc serve`` against a hostile or careless environment."""

from __future__ import annotations

import re

import httpx
import pytest
from browser import Served, awaiting, status

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")


def _flash(page: str) -> list[str]:
    return re.findall(r'class="flash" role="status">(.*?)</p>', page, re.S)


def test_the_decided_message_is_only_what_this_server_decided(afc):
    """The review page's "KEY: approved." line was read from the address (?decided=&key=):
    any link could put any sentence there, in the page's own green line, such as "shot-002:
    rejected." for a job no one decided, which a reviewer then passes by, or "Director: every
    picture below is checked: approved, use Approve the 3 shown.". It is now shown only
    when this server made the decision it names (the redirect after a decision carries a
    signature made with the server's own secret)."""
    awaiting(afc, 3)
    served = Served(afc)
    try:
        forged = [
            {"decided": "rejected", "key": "shot-002"},
            {"decided": "every picture below is checked, use Approve the 3 shown", "key": "QA"},
            {"decided": "approved", "key": "shot-002", "sig": "0" * 32},
            {"decided": "approved", "key": "shot-002", "sig": "é"},
        ]
        for query in forged:
            page = httpx.get(served.url + "review", params=query)
            assert page.status_code == 200
            assert _flash(page.text) == [], query
            assert "shot-002" in page.text  # the queue itself is shown as ever
        page = httpx.get(served.url + "review").text
        token = page.split('name="form_token" value="', 1)[1].split('"', 1)[0]
        decided = httpx.post(
            served.url + "review/approve",
            data={"key": "shot-001", "batch": "b1", "form_token": token},
            follow_redirects=True,
        )
        assert decided.status_code == 200
        assert _flash(decided.text) == ["shot-001: approved."]
        # the same signed address names another job: no message
        location = str(decided.url)
        swapped = httpx.get(location.replace("shot-001", "shot-003"))
        assert _flash(swapped.text) == []
    finally:
        code, _ = served.stop()
    assert code == 0
    assert status(afc, "shot-002") == "awaiting_review"
    assert status(afc, "shot-001") == "succeeded"
