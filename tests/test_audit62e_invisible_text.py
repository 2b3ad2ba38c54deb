"""Outside audit 62e: the pictures write a prompt's invisible format characters as
``\\uNNNN``, as every table and ``afc show`` write them.

A prompt is outside text (a client's shot list, a CSV pasted from a chat). In a terminal, afc
writes its bidirectional overrides and other invisible format characters as ``\\u202e``
(README: "a bidirectional override, U+202E, in a reviewer's note or a prompt"), and a
provider's error message is kept so in the ledger; ``afc serve``'s pages and ``afc report
--html`` wrote a prompt's as they were, and the browser acted on them: the prompt 'a red car
\\u202eeulb\\u202c' read 'a red car blue' on the review page, beside the picture a reviewer
approves or rejects against it (and in its tooltip, and on the contact sheet and the report).
The pages now write them as the terminal does (a template's ``finalize``); the markup a
template marks safe (style, charts) is untouched."""

from __future__ import annotations

import html

import pytest
from conftest import manifest

pytest.importorskip("starlette", reason="the web extra: pip install 'afc-cli[web]'")

RLO, PDF = "\u202e", "\u202c"
PROMPT = f"a red car {RLO}eulb{PDF}"
SHOWN = "a red car \\u202eeulb\\u202c"


def _ledger(afc) -> None:
    """One job awaiting review whose prompt holds a bidi override (local provider)."""
    data = manifest([{"key": "car", "prompt": PROMPT}])
    data["defaults"]["review"] = True
    afc.write_manifest(data)
    afc("submit", "manifest.yaml")
    assert afc.rows("SELECT key, status FROM jobs") == [("car", "awaiting_review")]


def _shown_escaped(text: str, where: str) -> None:
    assert RLO not in text and PDF not in text, f"{where}: a bidi override written as it is"
    # in the card's text and in its tooltip (the whole prompt)
    assert html.unescape(text).count(SHOWN) >= 2, where


def test_the_pages_write_a_prompt_s_bidi_override_as_the_terminal_does(afc):
    from browser import served_pages

    _ledger(afc)
    pages = served_pages(afc, "", "review")
    _shown_escaped(pages[""], "contact sheet")
    _shown_escaped(pages["review"], "review page")
    assert "<style>" in pages[""] and "&lt;style" not in pages[""]  # marked safe: as it is


def test_the_report_file_writes_a_prompt_s_bidi_override_as_the_terminal_does(afc):
    _ledger(afc)
    made = afc("report", "--html", "report.html")
    assert made.returncode == 0, made.stderr
    text = (afc.cwd / "report.html").read_text(encoding="utf-8")
    _shown_escaped(text, "report")
    assert "<svg" in text  # the charts, marked safe, written as they are
