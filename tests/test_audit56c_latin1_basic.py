"""Outside audit 56c (secrets): a proxy password with a letter outside ASCII
(``HTTP_PROXY=http://studio:p%C3%A4sswort-%C3%9Cber-42@proxy:3128``) is sent by afc's provider
calls (aiohttp's ``BasicAuth``) as the base64 of its Latin-1 bytes, as browsers and curl send
it; afc looked for the base64 of its UTF-8 bytes only, and a proxy quoting that header back in
its 407 had it shown on stderr and kept in the ledger. A value's encodings now include those of
its Latin-1 bytes too."""

from __future__ import annotations

import base64
import json
import re
import sqlite3
import urllib.parse

from test_audit_wire import OPENAI_RATES, WireServer, reply, run

PASSWORD = "pässwort-Über-42"


def _quoting_proxy():
    """A proxy refusing the request (407), quoting back the header it was sent inside its
    own words (so no ``Basic`` scheme stands before the base64)."""

    async def behaviour(head, body, writer) -> bool:
        said = re.search(rb"(?im)^proxy-authorization: basic (.*)\r$", head)
        sent = said.group(1).decode() if said else "none"
        writer.write(
            reply(
                "407 Proxy Authentication Required",
                json.dumps({"error": {"message": f"credentials={sent} refused"}}).encode(),
                {"Content-Type": "application/json"},
            )
        )
        await writer.drain()
        return True

    return behaviour


def test_a_latin1_proxy_password_quoted_back_is_shown_nowhere(afc):
    proxy = WireServer(_quoting_proxy())
    written = urllib.parse.quote(PASSWORD, safe="")
    try:
        env = {
            "OPENAI_BASE_URL": "http://api.openai.invalid/v1",
            "HTTP_PROXY": proxy.url.replace("http://", f"http://studio:{written}@"),
            "NO_PROXY": "",
            "no_proxy": "",
        }
        result = run(afc, "openai", "dall-e-3", OPENAI_RATES, env)
    finally:
        proxy.stop()
    sent = base64.b64encode(f"studio:{PASSWORD}".encode("latin-1")).decode()
    assert f"Proxy-Authorization: Basic {sent}".encode() in proxy.received[0][0]
    assert "credentials=" in result.stderr and "<redacted>" in result.stderr, result.stderr
    conn = sqlite3.connect(afc.cwd / "afc.db")
    dump = "\n".join(conn.iterdump())
    conn.close()
    for text in (result.stderr, dump):
        assert sent[8:20] not in text, text[-2000:]
