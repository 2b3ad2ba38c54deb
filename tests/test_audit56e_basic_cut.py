"""Outside audit 56e (secrets): a ``Basic`` credential whose base64 a cut ends one character
past a whole group (a length of 1 mod 4, which no base64 has: a message cut before it is
scrubbed, as ``providers.base.bounded`` scrubs the head it cuts) did not decode, and was
shown as it came: the user name and most of the password in it."""

from __future__ import annotations

import base64

from afc_cli import secrets


def test_a_basic_credential_cut_short_is_masked():
    sent = base64.b64encode(b"studio:hunter2-longer").decode()  # 28 characters
    for end in range(13, len(sent)):  # from the first cut past the colon
        if end % 4 != 1:
            continue
        out = secrets.scrub(f"407: Proxy-Authorization: Basic {sent[:end]}")
        assert out == "407: Proxy-Authorization: Basic <redacted>", (end, out)


def test_prose_after_basic_is_still_left_alone():
    for text in ("basic shape of it", "Basic Training poster", "a basic lamps test"):
        assert secrets.scrub(text) == text
