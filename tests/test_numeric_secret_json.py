"""A secret made of digits only (a service's numeric token, a PIN-like password in a
variable named ..._TOKEN or ..._PASSWORD) equal to a number in a --json document: the text's
scrub masked the number in place, '"size": <redacted>', and the document was no longer JSON,
so the script reading it failed. The number is now masked as a string, before encoding
(``secrets._once``), in a whole document and in a streamed one (``jsonout._pieces``)."""

from __future__ import annotations

import json

import pytest

from afc_cli import secrets
from afc_cli.jsonout import Streamed, emit_json

NUMBER = 987654321012


@pytest.fixture
def numeric_secret(monkeypatch):
    monkeypatch.setenv("STUDIO_SERVICE_TOKEN", str(NUMBER))
    secrets.reset()
    yield
    monkeypatch.delenv("STUDIO_SERVICE_TOKEN")
    secrets.reset()


@pytest.mark.parametrize("streamed", [False, True])
def test_a_number_equal_to_a_numeric_secret_is_masked_and_the_json_still_parses(
    numeric_secret, capsys, streamed
):
    rows = [{"key": "a", "size": NUMBER, "cost": 1.5}, {"key": "b", "size": 12}]
    emit_json({"jobs": Streamed(rows) if streamed else rows})
    text = capsys.readouterr().out
    assert str(NUMBER) not in text
    document = json.loads(text)  # was: JSONDecodeError at '<redacted>'
    assert document["jobs"] == [
        {"key": "a", "size": secrets.REDACTED, "cost": 1.5},
        {"key": "b", "size": 12},
    ]


def test_a_number_holding_a_piece_of_a_known_key_is_masked_whole(monkeypatch, capsys):
    """A known key's twelve-character pieces are masked too: a number holding one was cut in
    the text ('123<redacted>'), not JSON either."""
    key = "1234567890123456789"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    secrets.reset()
    try:
        emit_json({"n": int("9" + key[:12] + "9")})
    finally:
        monkeypatch.delenv("OPENAI_API_KEY")
        secrets.reset()
    assert json.loads(capsys.readouterr().out) == {"n": secrets.REDACTED}
