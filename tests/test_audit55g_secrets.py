"""Outside audit 55g: secrets that afc's environment gives inside a URL."""

from __future__ import annotations

import pytest

from afc_cli import secrets


@pytest.fixture
def fresh(monkeypatch):
    yield monkeypatch
    monkeypatch.undo()
    secrets.reset()


def test_a_key_in_a_provider_base_urls_query_is_masked_wherever_it_is_quoted(fresh):
    """A gateway in front of OpenAI takes its key in the base URL's query
    (OPENAI_BASE_URL=https://gw.example/v1?api-key=...). The key was masked only where a
    text showed it in URL form; an answer quoting it alone ('invalid key ...') kept it."""
    key = "gwk-3f9a81c07d2b4e65a9c1"
    fresh.setenv("OPENAI_BASE_URL", f"https://gw.example/v1?deployment=x&api-key={key}")
    fresh.setenv("REPLICATE_BASE_URL", "https://user:pa55word-of-the-gw@gw.example/v1")
    secrets.reset()
    assert key not in secrets.scrub(f"401: invalid key {key}")
    assert key[:14] not in secrets.scrub(f"401: invalid key {key[:14]}...")  # a piece too
    assert "pa55word-of-the-gw" not in secrets.scrub("bad password pa55word-of-the-gw")
    # a parameter named as no credential is not taken for one
    assert secrets.scrub("deployment x") == "deployment x"


def test_a_secret_cut_by_a_huge_answers_scrubbed_head_leaves_no_piece(fresh):
    """A provider's error answer past 8,000 characters is scrubbed in its first 8,000 alone
    and cut to 4,000. A secret that cut fell in was left in part at the head's end; where
    the head held the secret many times over (each copy scrubbed to '<redacted>'), the
    scrubbed head was shorter than 4,000 and its end, the secret's start, was kept."""
    from afc_cli.providers.base import MAX_MESSAGE_CHARS, bounded

    token = "gwt-" + "7c1e9b04d2a6" * 3  # 40 characters, a *_TOKEN variable's value
    fresh.setenv("GATEWAY_TOKEN", token)
    secrets.reset()
    copies = (2 * MAX_MESSAGE_CHARS - 20) // (len(token) + 1)
    echo = f"{token} " * copies
    message = echo + " " * (2 * MAX_MESSAGE_CHARS - 20 - len(echo)) + token + "x" * 500
    assert message.index(token, len(echo)) == 2 * MAX_MESSAGE_CHARS - 20  # cut at its 20th
    shown = bounded(message)
    assert token[:20] not in shown, shown[-200:]
    assert "<redacted>" in shown and "(cut: the message had" in shown
