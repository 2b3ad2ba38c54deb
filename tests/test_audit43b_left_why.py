"""Outside audit 43b: "Approve the N shown" says why it left each card undecided."""

from __future__ import annotations

import html
import re

import httpx
import pytest
from browser import Served, awaiting, status

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")


def test_approve_the_shown_names_why_a_card_s_picture_could_not_be_shown(afc):
    """The review page says which cards "Approve the N shown" left undecided, and why. A card
    whose picture's read failed (missing from storage, refused by S3, its bytes changed
    since afc verified them) said why on the card, but the page after the click said only
    "its picture was not shown", as for a picture never asked for: such a read is not kept
    as the card's thumbnail (it is read again next time), and that lost its why. It is said
    now, as the card said it."""
    awaiting(afc, 3)
    [(key,)] = afc.rows("SELECT output_key FROM jobs WHERE key = 'shot-002'")
    (afc.outputs() / key).unlink()
    served = Served(afc)
    try:
        page = httpx.get(served.url + "review").text
        for src in re.findall(r'<img src="([^"]+)"', page):  # as the browser loads them
            httpx.get(httpx.URL(served.url).join(src))
        token = page.split('name="form_token" value="', 1)[1].split('"', 1)[0]
        done = httpx.post(
            served.url + "review/approve-shown",
            data={
                "form_token": token,
                "batch": ["b1"] * 3,
                "key": ["shot-001", "shot-002", "shot-003"],
            },
            follow_redirects=True,
        )
        said = " ".join(
            html.unescape(m)
            for m in re.findall(r'class="flash[^"]*"[^>]*>(.*?)</p>', done.text, re.S)
        )
        assert "2 jobs: approved." in said
        assert "shot-002 (cannot read " in said and "shot-002.png: missing)" in said, said
        assert "was not shown" not in said.split("shot-002", 1)[1], said
    finally:
        code, _ = served.stop()
    assert code == 0
    assert status(afc, "shot-002") == "awaiting_review"
