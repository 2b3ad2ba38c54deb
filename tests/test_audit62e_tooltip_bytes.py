"""Outside audit 62e: a card's tooltip holds the first 1,000 characters of its prompt, not
all of them.

A prompt may hold 32,000 characters (gpt-image's limit, the manifest's). Each card wrote the
whole of it in its tooltip (``title``), which Chromium cuts at 1,024 characters when it shows
it: measured, a report of 1,000 jobs awaiting review with 30,000-character prompts was 62 MB,
60 MB of it tooltips (each prompt twice, on the contact sheet and the review pages), far past
what mail takes; a page of afc serve 3.7 MB. Now a tooltip holds ``TIP_CHARS`` (1,000) of it,
its cut said ('...'); the whole prompt is ``afc show KEY``'s."""

from __future__ import annotations

import html
import re

import pytest
from conftest import manifest

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")

JOBS = 3
WORDS = 6000  # 30,000 characters a prompt


def _ledger(afc) -> None:
    data = manifest(
        [{"key": f"shot-{i}", "prompt": f"shot {i} " + "word " * WORDS} for i in range(JOBS)]
    )
    data["defaults"]["review"] = True
    afc.write_manifest(data)
    afc("submit", "manifest.yaml")
    assert {status for (status,) in afc.rows("SELECT status FROM jobs")} == {"awaiting_review"}


def _tooltips(text: str) -> list[str]:
    return [html.unescape(t) for t in re.findall(r'<p class="prompt" title="([^"]*)"', text)]


def _cut(tips: list[str], count: int) -> None:
    assert len(tips) == count
    for tip in tips:
        assert tip.startswith("shot ") and tip.endswith("...")
        assert 900 <= len(tip) <= 1010, len(tip)


def test_the_pages_tooltips_hold_the_first_thousand_characters(afc):
    from browser import served_pages

    _ledger(afc)
    pages = served_pages(afc, "", "review")
    for name, text in pages.items():
        _cut(_tooltips(text), JOBS)
        # the 3 prompts' 90,000 characters are not on the page (each card a few KB)
        assert len(text.encode()) < 40_000, (name, len(text.encode()))


def test_the_report_s_tooltips_hold_the_first_thousand_characters(afc):
    _ledger(afc)
    made = afc("report", "--html", "report.html")
    assert made.returncode == 0, made.stderr
    text = (afc.cwd / "report.html").read_text(encoding="utf-8")
    _cut(_tooltips(text), 2 * JOBS)  # the contact sheet's cards and the review's
    assert "word " * 1000 not in text
