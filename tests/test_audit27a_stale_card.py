"""Outside audit 27a found: a card's Approve (or Reject) on a review page loaded before its
job was rendered again (rejected or cancelled, retried, awaiting review with a new output)
decided the new output, which nobody had seen: the forms named the job only. They carry the
SHA-256 of the output the page showed now, and a decision on another output is refused."""

from __future__ import annotations

import httpx
import pytest
from browser import Served, awaiting, ledger_state, status

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")


def form_fields(page: str, action: str) -> dict[str, str]:
    form = page.split(f'/review/{action}"', 1)[1].split("</form>", 1)[0]
    fields = {}
    for part in form.split("<input")[1:]:
        if 'type="hidden"' in part:
            name = part.split('name="', 1)[1].split('"', 1)[0]
            fields[name] = part.split('value="', 1)[1].split('"', 1)[0]
    return fields


def test_a_decision_on_an_output_the_page_did_not_show_is_refused(afc):
    awaiting(afc, 1)
    [(sha,)] = afc.rows("SELECT output_sha256 FROM jobs WHERE key = 'shot-001'")
    served = Served(afc)
    try:
        page = httpx.get(served.url + "review").text
        approve = form_fields(page, "approve")
        reject = form_fields(page, "reject")
        assert approve["sha256"] == sha and reject["sha256"] == sha
        assert afc.json("review", "list")["awaiting_review"][0]["sha256"] == sha
        before = ledger_state(afc.cwd / "afc.db")
        for action, fields in (("approve", approve), ("reject", reject)):
            stale = {**fields, "sha256": "0" * 64, "reason": "too dark"}
            answer = httpx.post(f"{served.url}review/{action}", data=stale)
            assert answer.status_code == 409, answer.text
            assert "its output changed since this page showed it" in answer.text
        assert ledger_state(afc.cwd / "afc.db") == before
        assert status(afc, "shot-001") == "awaiting_review"
        shown = httpx.post(served.url + "review/approve", data=approve)
        assert shown.status_code == 303, shown.text
    finally:
        code, _ = served.stop()
    assert code == 0
    assert status(afc, "shot-001") == "succeeded"
