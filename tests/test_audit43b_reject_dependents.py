"""Outside audit 43b: afc serve's Reject says the blocked jobs it failed with the job."""

from __future__ import annotations

import html
import re

import httpx
import pytest
from browser import Served, status
from conftest import manifest

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")


def test_a_rejection_on_the_review_page_says_the_jobs_it_failed(afc):
    """'afc review reject style-frame' says "3 blocked jobs that needed them failed
    (DEPENDENCY_FAILED ...)"; the same Reject on afc serve's review page, "through the same
    code", said "style-frame: rejected." alone: a style frame rejected there failed every
    shot behind it with no word of it. The page now says how many failed, and what to do."""
    listed = [{"key": "style-frame", "prompt": "the look", "review": True}]
    listed += [{"key": f"shot-{i}", "prompt": f"p{i}", "needs": ["style-frame"]} for i in range(3)]
    afc.write_manifest(manifest(listed))
    afc("submit", "manifest.yaml")
    assert status(afc, "style-frame") == "awaiting_review"
    served = Served(afc)
    try:
        page = httpx.get(served.url + "review").text
        token = page.split('name="form_token" value="', 1)[1].split('"', 1)[0]
        done = httpx.post(
            served.url + "review/reject",
            data={"key": "style-frame", "batch": "b1", "reason": "too dark", "form_token": token},
            follow_redirects=True,
        )
        said = [
            html.unescape(m)
            for m in re.findall(r'class="flash[^"]*"[^>]*>(.*?)</p>', done.text, re.S)
        ]
    finally:
        code, _ = served.stop()
    assert code == 0
    assert said[0] == "style-frame: rejected."
    assert said[1].startswith("3 blocked jobs that needed style-frame failed with it")
    assert [status(afc, f"shot-{i}") for i in range(3)] == ["failed"] * 3
