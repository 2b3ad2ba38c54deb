"""Outside audit 56f (secrets): the ``Basic`` credential shape (a proxy quoting back its
``Proxy-Authorization``, audit 56c) took 'Basic' or 'basic' followed by any run of base64
letters that decodes, padded by afc, to printable text with a colon: 'One' (':w'), 'Or'
(':'), 'Only' (':yr'), 'Old', 'Ok', a number such as '2486' ('ۏ:'). A reviewer's reason 'too
basic One more pass' was kept and shown as 'too basic <redacted> more pass', the same in a
provider's message or an event. A token is now taken for a credential only as an encoder
writes one (padded to a multiple of four characters) and holding a user:password with a
password (or a user name of ``MIN_SECRET_CHARS``, a key with an empty password) and a user
name (or a password of ``MIN_SECRET_CHARS``, a token with an empty user name)."""

from __future__ import annotations

import base64

from conftest import manifest

from afc_cli import secrets

REASON = "too basic One more pass; Basic Old West palette, basic 2486 px, basic Only the sky"


def test_prose_after_basic_is_kept_as_written_in_a_review_reason(afc):
    afc.write_manifest(manifest([{"key": "frame", "prompt": "a frame", "review": True}]))
    assert afc("submit", "manifest.yaml", "-q").returncode == 0
    assert afc("review", "reject", "frame", "--reason", REASON).returncode == 0
    story = afc.json("show", "frame")
    assert story["decisions"][0]["note"] == REASON, story["decisions"]
    shown = afc("show", "frame")
    assert REASON in shown.stdout, shown.stdout


def test_credentials_as_sent_are_still_masked():
    for said in ("studio:hunter2", "x:y", ":an-azure-devops-pat", "APIKEY0123:"):
        token = base64.b64encode(said.encode()).decode()
        assert secrets.scrub(f"got Basic {token} back") == "got Basic <redacted> back", said
