"""Outside audit 56f (secrets): a proxy password that is a plain word with a letter outside
ASCII (``HTTP_PROXY=http://studio:p%C3%A4sswort@proxy:3128``), or a short one (``pä55``), is
masked only where it stands as a credential (``secrets._a_word``, fewer than 8 characters): for
a header, the ``Basic`` shape. afc's provider calls send it as aiohttp's ``BasicAuth`` does, the
base64 of its Latin-1 bytes, which the shape decoded as UTF-8 only: not text, so left as it
came, and a proxy quoting the header back in its 407 had the password shown on stderr and
kept in the ledger (base64 hides nothing)."""

from __future__ import annotations

import base64
import sqlite3
import urllib.parse

import pytest
from test_audit56c_basic_auth import _quoting_proxy
from test_audit_wire import OPENAI_RATES, WireServer, run


@pytest.mark.parametrize("password", ["pässwort", "pä55"])
def test_a_latin1_word_proxy_password_quoted_back_as_basic_is_shown_nowhere(afc, password):
    proxy = WireServer(_quoting_proxy())
    written = urllib.parse.quote(password, safe="")
    try:
        env = {
            "OPENAI_BASE_URL": "http://api.openai.invalid/v1",
            "HTTP_PROXY": proxy.url.replace("http://", f"http://studio:{written}@"),
            "NO_PROXY": "",
            "no_proxy": "",
        }
        result = run(afc, "openai", "dall-e-3", OPENAI_RATES, env)
        story = afc("show", "shot", "--json", env=env).stdout
    finally:
        proxy.stop()
    sent = base64.b64encode(f"studio:{password}".encode("latin-1")).decode()
    assert f"Proxy-Authorization: Basic {sent}".encode() in proxy.received[0][0]
    assert "proxy refused credentials Basic <redacted>" in result.stderr, result.stderr
    conn = sqlite3.connect(afc.cwd / "afc.db")
    dump = "\n".join(conn.iterdump())
    conn.close()
    for text in (result.stderr, story, dump):
        assert sent not in text, text[-2000:]


@pytest.mark.parametrize("password", ["pässwort", "pä55"])
def test_the_same_password_from_netrc_quoted_back_is_shown_nowhere(afc, tmp_path, password):
    """The same password from ``~/.netrc`` (``NETRC``) for the proxy's host, its URL holding
    none: registered where the provider calls read it (``transport.env_proxy``), whose
    registration of the header's tokens no test reached (a mutant dropping it passed)."""
    proxy = WireServer(_quoting_proxy())
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine 127.0.0.1 login studio password {password}\n", "utf-8")
    netrc.chmod(0o600)
    try:
        env = {
            "OPENAI_BASE_URL": "http://api.openai.invalid/v1",
            "HTTP_PROXY": proxy.url,
            "NETRC": str(netrc),
            "NO_PROXY": "",
            "no_proxy": "",
        }
        result = run(afc, "openai", "dall-e-3", OPENAI_RATES, env)
        story = afc("show", "shot", "--json", env=env).stdout
    finally:
        proxy.stop()
    sent = base64.b64encode(f"studio:{password}".encode("latin-1")).decode()
    assert f"Proxy-Authorization: Basic {sent}".encode() in proxy.received[0][0]
    assert "proxy refused credentials Basic <redacted>" in result.stderr, result.stderr
    conn = sqlite3.connect(afc.cwd / "afc.db")
    dump = "\n".join(conn.iterdump())
    conn.close()
    for text in (result.stderr, story, dump):
        assert sent not in text, text[-2000:]
