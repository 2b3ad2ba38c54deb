"""Outside audit 32c: a --json document stays JSON when a string holds '?token="...'."""

from __future__ import annotations

import json

from conftest import manifest


def strings(value):
    """Every string inside a JSON value."""
    if isinstance(value, dict):
        return [text for item in value.values() for text in strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in strings(item)]
    return [value] if isinstance(value, str) else []


PROMPT = 'a poster that reads ?code="SPRING" in neon'
NOTE = 'the link is https://shop.test/p?token="" broken'


def test_a_query_parameter_written_with_a_quote_keeps_the_json_document_json(afc):
    """README: --json prints one JSON document, scrubbed. emit_json scrubs each string, then
    the encoded text (shapes split across values); in that text a string's quote is '\\"',
    and a '?code='/'?token='-style parameter whose value began with a quote (a prompt's
    '?code="SPRING"', a reviewer's note quoting a link) had its backslash masked alone:
    '?code=<redacted>"SPRING\\"', the quote unescaped, and 'afc show', 'afc status' and 'afc
    outputs' --json were no longer JSON (a script's json.loads failed). The escape is kept
    whole: the documents parse, and say the text as the tables do."""
    afc.write_manifest(
        manifest([{"key": "a", "prompt": PROMPT}, {"key": "b", "prompt": "p", "review": True}])
    )
    assert afc("submit", "manifest.yaml", "-q").returncode == 0
    rejected = afc("review", "reject", "b", "--reason", NOTE, "-q")
    assert rejected.returncode == 0, rejected.stderr
    assert PROMPT in strings(afc.json("outputs"))
    assert PROMPT in strings(afc.json("show", "a"))
    assert any(NOTE in text for text in strings(afc.json("show", "b")))
    assert any(NOTE in text for text in strings(afc.json("status")))


def test_a_secret_after_an_escape_is_still_masked_whole():
    """The text scrub still masks a value holding escapes (a line break, a quote), each
    escape whole, and the document stays JSON."""
    from afc_cli.secrets import scrub

    text = json.dumps({"m": 'https://x.test/?sig=ab\ncd"ef and ?key=\\"g'})
    scrubbed = scrub(text, decode=False)
    assert json.loads(scrubbed) == {"m": "https://x.test/?sig=<redacted> and ?key=<redacted>"}
