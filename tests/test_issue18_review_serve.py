"""``afc serve``'s review actions over plain HTTP, against afc_cli.review: a GET to an
action address decides nothing, nor does a POST without the server's form token, a rejection
without a reason or an unknown key. (The browser clicks Approve and Reject in
tests/test_issue18_browser.py.)"""

from __future__ import annotations

import httpx
import pytest
from browser import Served, awaiting, ledger_state, status

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")


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
