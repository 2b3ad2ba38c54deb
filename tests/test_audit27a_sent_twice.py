"""Outside audit 27a: a decision of afc serve's review page sent twice (a double click, the
back button and the form sent again)."""

from __future__ import annotations

import html
import re
from urllib.parse import urlencode

import httpx
import pytest
from browser import Served, awaiting, status

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")


def _text(page: str) -> str:
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page)))


def _flash(page: str) -> list[str]:
    found = re.findall(r'class="flash" role="status">(.*?)</p>', page, re.S)
    return [html.unescape(text) for text in found]


def test_a_decision_sent_twice_says_it_is_made_not_that_nothing_was(afc):
    """A double click on Approve sends the form twice (the browser shows the second answer):
    the second was refused with a 409 page "cannot approve, nothing was decided", though the
    first had approved the job, and a reviewer read that the approval had failed; after
    "Approve the 120 shown" it read that none of the 120 was approved. A decision whose jobs
    all have it already is now the review page saying so; one that meets another decision
    (rejected by someone else) is still refused, naming it."""
    awaiting(afc, 4)
    served = Served(afc)
    try:
        page = httpx.get(served.url + "review").text
        token = page.split('name="form_token" value="', 1)[1].split('"', 1)[0]
        for src in re.findall(r'<img src="([^"]+)"', page):
            httpx.get(httpx.URL(served.url).join(src))
        approve = {"key": "shot-001", "batch": "b1", "form_token": token}
        reject = {"key": "shot-002", "batch": "b1", "form_token": token, "reason": "too dark"}
        for action, form, decided in (
            ("approve", approve, "approved"),
            ("reject", reject, "rejected"),
        ):
            answers = [
                httpx.post(f"{served.url}review/{action}", data=form, follow_redirects=True)
                for _ in range(2)
            ]
            assert [a.status_code for a in answers] == [200, 200]
            key = form["key"]
            assert _flash(answers[0].text) == [f"{key}: {decided}."]
            [again] = _flash(answers[1].text)
            assert again.startswith(f"{key} (already, by ") and again.endswith(f": {decided}.")
            assert "nothing was decided" not in _text(answers[1].text)
        # approved twice in a row: the job was rejected, so approving it is refused as before
        other = httpx.post(f"{served.url}review/approve", data={**approve, "key": "shot-002"})
        assert other.status_code == 409 and "it is rejected" in _text(other.text)
        fields = [("form_token", token)]
        for key in ("shot-003", "shot-004"):
            fields += [("batch", "b1"), ("key", key)]
        shown = [
            httpx.post(
                served.url + "review/approve-shown",
                content=urlencode(fields),
                headers={"Content-Type": "application/x-www-form-urlencoded"},
                follow_redirects=True,
            )
            for _ in range(2)
        ]
        assert [a.status_code for a in shown] == [200, 200]
        assert _flash(shown[0].text) == ["2 jobs: approved."]
        [again] = _flash(shown[1].text)
        assert again.startswith("2 jobs (already") and again.endswith(": approved.")
    finally:
        code, stderr = served.stop()
    assert code == 0 and "Traceback" not in stderr
    assert status(afc, "shot-001") == "succeeded" and status(afc, "shot-002") == "rejected"
    decisions = afc.rows("SELECT j.key, r.decision FROM reviews r JOIN jobs j ON j.id = r.job_id")
    assert sorted(decisions) == [
        ("shot-001", "approved"),
        ("shot-002", "rejected"),
        ("shot-003", "approved"),
        ("shot-004", "approved"),
    ]
