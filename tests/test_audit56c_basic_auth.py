"""Outside audit 56c (secrets): a ``Basic`` credential quoted back was masked only where the
password in it was a secret value afc knew, of 8 characters or more. A proxy variable's
password of fewer (``HTTP_PROXY=http://studio:hunter2@proxy:3128``, sent as
``Proxy-Authorization: Basic base64(studio:hunter2)``), or a user name and password an output
URL named, quoted back in a 407 or an error, was shown on stderr and kept in the ledger and
--json as it came: base64 hides nothing. A ``Basic`` scheme followed by the base64 of a
``user:password`` is now a token shape, masked whoever's it is, as ``Bearer …`` is."""

from __future__ import annotations

import base64
import json
import re
import sqlite3

from hypothesis import given, settings
from hypothesis import strategies as st
from test_audit_wire import OPENAI_RATES, WireServer, reply, run

from afc_cli import secrets

SENT = base64.b64encode(b"studio:hunter2").decode()  # a password too short to be a value


def _quoting_proxy():
    """A proxy refusing the request (407), quoting back the credentials it was sent."""

    async def behaviour(head, body, writer) -> bool:
        said = re.search(rb"(?im)^proxy-authorization: (.*)\r$", head)
        sent = said.group(1).decode() if said else "none"
        message = f"proxy refused credentials {sent}"
        writer.write(
            reply(
                "407 Proxy Authentication Required",
                json.dumps({"error": {"message": message}}).encode(),
                {"Content-Type": "application/json", "Proxy-Authenticate": 'Basic realm="corp"'},
            )
        )
        await writer.drain()
        return True

    return behaviour


def test_a_short_proxy_password_quoted_back_as_basic_is_shown_nowhere(afc):
    proxy = WireServer(_quoting_proxy())
    try:
        env = {
            "OPENAI_BASE_URL": "http://api.openai.invalid/v1",
            "HTTP_PROXY": proxy.url.replace("http://", "http://studio:hunter2@"),
            "NO_PROXY": "",
            "no_proxy": "",
        }
        result = run(afc, "openai", "dall-e-3", OPENAI_RATES, env)
        shown = afc("status", "--json", env=env).stdout
        story = afc("show", "shot", "--json", env=env).stdout
    finally:
        proxy.stop()
    assert f"Proxy-Authorization: Basic {SENT}".encode() in proxy.received[0][0]
    assert "proxy refused credentials Basic <redacted>" in result.stderr, result.stderr
    conn = sqlite3.connect(afc.cwd / "afc.db")
    dump = "\n".join(conn.iterdump())
    conn.close()
    assert "proxy refused credentials Basic <redacted>" in dump
    for text in (result.stderr, shown, story, dump):
        assert SENT not in text and "hunter2" not in text, text[-2000:]


@settings(max_examples=200, deadline=None)
@given(
    st.text(
        # a user name: an empty one with a password of fewer than 8 characters is prose
        # ('basic Only' decodes to ':yr', tests/test_audit56f_basic_prose.py)
        st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters=":"),
        min_size=1,
        max_size=12,
    ),
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=12),
    st.sampled_from(["Basic ", "basic ", "BASIC  "]),
)
def test_any_basic_credentials_are_masked_whoever_s_they_are(user, password, scheme):
    sent = base64.b64encode(f"{user}:{password}".encode()).decode()
    out = secrets.scrub(f"407: Proxy-Authorization: {scheme}{sent} refused")
    assert out == f"407: Proxy-Authorization: {scheme}<redacted> refused", out


def test_the_word_basic_in_prose_is_left_as_written():
    for text in (
        "Basic Training poster, 35mm",
        "basic shapes only",
        'Proxy-Authenticate: Basic realm="corp"',
        "a Basic test of contrast",
    ):
        assert secrets.scrub(text) == text
