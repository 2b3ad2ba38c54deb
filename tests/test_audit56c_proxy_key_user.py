"""Outside audit 56c (secrets): a proxy whose key is the user name of its URL, the password left
empty (``HTTPS_PROXY=http://APIKEY:@proxy.zyte.com:8011``, Zyte's form), had that key taken for
no secret: only a proxy URL's password was. afc sends it as ``Proxy-Authorization: Basic
base64(APIKEY:)``, and a proxy naming the key it refused in its 407 had it shown on stderr and
kept in the ledger. A proxy URL's user name is now the secret where its password is empty."""

from __future__ import annotations

import base64
import json
import re
import sqlite3

from test_audit_wire import OPENAI_RATES, WireServer, reply, run

KEY = "3f9a81c07d2b4e65a9c1e0b7"


def _naming_proxy():
    """A proxy refusing the request (407), naming the key it was sent."""

    async def behaviour(head, body, writer) -> bool:
        said = re.search(rb"(?im)^proxy-authorization: basic (.*)\r$", head)
        user = base64.b64decode(said.group(1)).decode().partition(":")[0] if said else ""
        writer.write(
            reply(
                "407 Proxy Authentication Required",
                json.dumps({"error": {"message": f"unknown API key {user}"}}).encode(),
                {"Content-Type": "application/json"},
            )
        )
        await writer.drain()
        return True

    return behaviour


def test_a_proxy_key_given_as_its_user_name_is_shown_nowhere(afc):
    proxy = WireServer(_naming_proxy())
    try:
        env = {
            "OPENAI_BASE_URL": "http://api.openai.invalid/v1",
            "HTTP_PROXY": proxy.url.replace("http://", f"http://{KEY}:@"),
            "NO_PROXY": "",
            "no_proxy": "",
        }
        result = run(afc, "openai", "dall-e-3", OPENAI_RATES, env)
        shown = afc("status", "--json", env=env).stdout
    finally:
        proxy.stop()
    assert b"Proxy-Authorization: Basic " in proxy.received[0][0]
    assert "unknown API key <redacted>" in result.stderr, result.stderr
    conn = sqlite3.connect(afc.cwd / "afc.db")
    dump = "\n".join(conn.iterdump())
    conn.close()
    for text in (result.stderr, shown, dump):
        assert KEY not in text and KEY[:12] not in text, text[-2000:]


def test_a_proxy_key_given_as_its_netrc_login_is_shown_nowhere(afc, tmp_path):
    """The same key from ``~/.netrc`` (``NETRC``), a login with no password."""
    proxy = WireServer(_naming_proxy())
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine 127.0.0.1 login {KEY}\n")
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
    finally:
        proxy.stop()
    assert b"Proxy-Authorization: Basic " in proxy.received[0][0]
    assert "unknown API key <redacted>" in result.stderr, result.stderr
    files = b"".join(p.read_bytes() for p in afc.cwd.glob("afc.db*") if p.is_file())
    assert KEY not in result.stderr and KEY not in files.decode("latin-1")
