"""Outside audit 57g: ``afc status --json`` of a catalogue's ledger spent half its time in the
secret scrubber (12,000 jobs: 1.4 s of 2.4 s; 120,000 jobs: 40 s in all), trying its fourteen
token shapes and five decoders on every distinct string of every row (the job's key, its
output's path, the row's JSON text), afc's own names among them, where none of the shapes
could match. A text holding none of what a shape needs to match (its scheme's word, its
prefix, '://', '?' or '&', ...) nor anything a decoder changes is now looked at for the
secret values and their pieces alone, as before; the shapes are tried only where they could
match. Counted as the texts the shapes are tried on (``secrets.shape_scans``)."""

from __future__ import annotations

import json
import re

from conftest import jobs, manifest

from afc_cli import secrets
from afc_cli.costs import RateCards
from afc_cli.jsonout import Streamed, emit_json
from afc_cli.ledger import Ledger
from afc_cli.listing import status_view
from afc_cli.manifest import load_manifest

KEY = "sk-proj-abcdefghij0123456789XYZ"


def _status_json(path: str, capsys) -> tuple[list[dict], int]:
    view = status_view(path, batch=None, everything=True, stream=True)
    before = secrets.shape_scans
    emit_json({"jobs": Streamed(view["jobs"])})
    scans = secrets.shape_scans - before
    return json.loads(capsys.readouterr().out)["jobs"], scans


def test_status_json_tries_the_shapes_only_where_one_could_match(
    tmp_path, afc, monkeypatch, capsys
):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    secrets.reset()
    path = str(tmp_path / "l.db")
    ledger = Ledger(path)
    try:
        data = manifest(jobs(300), batch="catalogue")
        m = load_manifest(afc.write_manifest(data))
        ledger.admit(m, "file:///tmp/x", RateCards())
        with ledger.tx():
            ledger.db.execute(
                "UPDATE jobs SET status = 'failed', error_code = 'auth', error_message = ?"
                " WHERE key IN ('shot-001', 'shot-002', 'shot-003')",
                (f"Incorrect API key provided: {KEY[:10]}...{KEY[-12:]}",),
            )
            ledger.db.execute(
                "UPDATE jobs SET error_message = 'key ' || ? WHERE key = 'shot-002'",
                (KEY.upper(),),  # the value, in another case: no shape, found as a value
            )
            ledger.db.execute(
                "UPDATE jobs SET error_message = 'Authorization: Bearer Zm9vYmFyYmF6cXV4'"
                " WHERE key = 'shot-003'"
            )
    finally:
        ledger.close()
    rows, scans = _status_json(path, capsys)
    assert len(rows) == 300
    # the few texts that hold a shape's start (the bearer message, each row's JSON text
    # around it), not the 300 keys, 300 rows and their constant strings (900 and more before)
    assert scans < 20, scans
    text = json.dumps(rows)
    assert KEY[-12:] not in text and KEY.upper() not in text and "Zm9vYmFy" not in text
    by_key = {row["key"]: row for row in rows}
    assert by_key["shot-003"]["error"]["message"] == "Authorization: Bearer <redacted>"
    assert by_key["shot-002"]["error"]["message"] == "key <redacted>"
    assert by_key["shot-150"]["key"] == "shot-150"


def test_the_hint_holds_what_every_shape_needs():
    """Each shape's matches hold the hint (so a shape added without its hint is caught),
    and a text without the hint or a decoder's character is scrubbed as the shapes and
    decoders would: by the values alone."""
    samples = [
        "Bearer sk-abcdefgh1234",
        "bEaReR abcdefgh12345678",
        "Key abcdef12:abcdef34",
        "Basic dXNlcjpwYXNzd29yZDEyMw==",
        "baſic dXNlcjpwYXNzd29yZDEyMw==",
        "Token abcdefghijklmnop1234",
        "sk-abcdefgh",
        "r8_abcdefgh",
        "AIzaabcdefghijkl",
        "whsec_abcd",
        "https://u:p@host",
        "https://hooks.slack.com/services/T0000000/B0000000/abcdefgh123",
        "https://HOOKS.SLACK.com/workflows/T0000000/abc/abcdefgh123",
        "https://discord.com/api/webhooks/123456789012345678/abcdefghijklmnopqrstu",
        "x?token=abc&sig=def",
        # each hint alone, none of the others with it (the samples above hold '://' with the
        # paths, '?' with '&': a mutant without '/services/T', '/api/', '?', '&' or
        # 'hooks.slack' in ``_SHAPE_NEEDS`` or its any-case list passed, and such a text, an
        # error quoting a path or a query, was shown with its secret)
        "POST /services/T0000000/B0000000/abcdefgh123 failed",
        "POST /api/webhooks/123456789012345678/abcdefghijklmnopqrstu failed",
        "GET /x?token=abcdefgh",
        "cut short: &sig=abcdefgh",
        "posted to HOOKS.SLACK.com/workflows/T0000000/abc/abcdefgh123 failed",
    ]
    for text in samples:
        scanned = [p.pattern for p, _ in secrets._SHAPES if p.search(text)]
        assert scanned, text  # each sample is some shape's
        assert secrets._SHAPE_HINT.search(text), text
        assert secrets._shape_hinted(text), text
    # the substrings' check says what the regex says, in ASCII text or not
    for text in [*samples, "sku-0001-000123", "a flag bearer", "BASIC", "ſk-x", "beaſic", "é?"]:
        for variant in (text, text.upper(), text + " é", "K" + text):
            assert secrets._shape_hinted(variant) == bool(secrets._SHAPE_HINT.search(variant))
    # every shape's pattern names its start among the hint's (a shape without one of them)
    hint = secrets._SHAPE_HINT.pattern
    for pattern, _ in secrets._SHAPES:
        starts = re.findall(
            r"bearer|basic|hooks|Key|Token|sk-|r8_|AIza|whsec_|://|/services/T|/api/|\[\?&\]",
            pattern.pattern,
        )
        assert starts and all(re.escape(s) in hint or s in hint for s in starts), pattern.pattern


def test_a_token_a_decoder_reveals_is_scrubbed_without_the_hint():
    """A token whose shape only a decoder reveals (percent-encoded, JSON-escaped, split over
    lines, a zero-width character inside) holds none of the hint's starts: it is the
    decoders' characters (``_DECODE_HINT``) that send it to the shapes. A mutant without
    '%' there passed every test, and 'sk%2D…' (a key quoted back in a URL's path) was shown
    whole by 'afc status --json' and 'afc outputs'."""
    secrets.reset()
    token = "abcdefghijkl0123"
    for text in [
        f"sk%2D{token}",
        f"r8%5F{token}",
        f"sk\\u002d{token}",
        f"s\nk-{token}",
        f"sk\r-{token}",
        f"sk\u200b-{token}",
        f"sk\u00ad-{token}",
        f"sk\u2060-{token}",
        f"sk\ufeff-{token}",
    ]:
        assert not secrets._shape_hinted(text), text  # the decoders' alone
        assert token not in secrets.scrub(text), text
