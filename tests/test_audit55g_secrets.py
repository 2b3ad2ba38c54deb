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
