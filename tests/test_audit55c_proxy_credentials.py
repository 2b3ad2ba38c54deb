"""Outside audit 55c (secrets): the password in a proxy variable's URL
(``HTTPS_PROXY=http://user:PASSWORD@proxy:3128``, a credential in a URL's userinfo) was masked
only where a text showed it as a URL. afc sends it to the proxy as ``Proxy-Authorization: Basic
base64(user:PASSWORD)``, and a proxy that quoted that header back in its 407 had it shown on
stderr, kept in the ledger and in --json; so did a proxy naming the password plainly. The
password of each proxy variable is now one of the secret values (its encodings and pieces
too), as a provider key is."""

from __future__ import annotations

import base64
import json
import re
import sqlite3
import string
import urllib.parse

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_audit_wire import OPENAI_RATES, WireServer, reply, run

from afc_cli import secrets

PASSWORD = "Pr0xyPassw0rd-7Kq2Zx9"


def _quoting_proxy():
    """A proxy that refuses the request (407), quoting back the credentials it was sent and
    the password they hold, in an error body as a gateway writes one."""

    async def behaviour(head, body, writer) -> bool:
        said = re.search(rb"(?im)^proxy-authorization: (.*)\r$", head)
        sent = said.group(1).decode() if said else "none"
        password = base64.b64decode(sent.split()[-1]).decode().partition(":")[2] if said else ""
        message = f"proxy refused credentials {sent} (password {password!r})"
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


def test_a_proxy_quoting_back_its_credentials_leaks_no_password(afc):
    proxy = WireServer(_quoting_proxy())
    try:
        env = {
            "OPENAI_BASE_URL": "http://api.openai.invalid/v1",
            "HTTP_PROXY": proxy.url.replace("http://", f"http://studio:{PASSWORD}@"),
            "NO_PROXY": "",
            "no_proxy": "",
        }
        result = run(afc, "openai", "dall-e-3", OPENAI_RATES, env)
        shown = afc("status", "--json", env=env).stdout
    finally:
        proxy.stop()
    assert b"Proxy-Authorization: Basic " in proxy.received[0][0]  # it was sent, and quoted
    assert "proxy refused credentials Basic " in result.stderr, result.stderr
    assert "(password '<redacted>')" in result.stderr, result.stderr
    conn = sqlite3.connect(afc.cwd / "afc.db")
    dump = "\n".join(conn.iterdump())
    conn.close()
    files = b"".join(p.read_bytes() for p in afc.cwd.glob("afc.db*") if p.is_file())
    sent = base64.b64encode(f"studio:{PASSWORD}".encode()).decode()
    for text in (result.stderr, shown, dump, files.decode("latin-1")):
        assert PASSWORD not in text and sent[4:20] not in text, text[-2000:]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.text(alphabet=string.ascii_letters + string.digits + "-_.~!$&'()*+,;=:@/ ", min_size=8),
    st.sampled_from(["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "ALL_PROXY"]),
    st.sampled_from(["basic", "plain", "percent"]),
)
def test_a_proxy_password_is_a_secret_in_every_form_it_is_sent_or_written(password, name, form):
    weak = len(password.strip()) < secrets.MIN_SECRET_CHARS or secrets._a_word(password.strip())
    if weak and form != "basic":
        # a short value or a plain word is masked as a credential only, its Basic header one
        # (tests/test_audit56c_weak_passwords.py)
        return
    written = urllib.parse.quote(password, safe="")
    echo = {
        "basic": "Basic " + base64.b64encode(f"studio:{password}".encode()).decode(),
        "plain": password,
        "percent": written,
    }[form]
    saved = secrets.os.environ.get(name)
    try:
        secrets.os.environ[name] = f"http://studio:{written}@proxy.corp:3128"
        secrets.reset()
        out = secrets.scrub(f"407 from the proxy: {echo} refused")
    finally:
        secrets.os.environ.pop(name, None)
        if saved is not None:
            secrets.os.environ[name] = saved
        secrets.reset()
    assert out.startswith("407 from the proxy: ") and out.endswith(" refused"), out
    assert "<redacted>" in out, out


def test_a_proxy_password_from_netrc_quoted_back_is_shown_nowhere(afc, tmp_path):
    """The proxy's credentials from ``~/.netrc`` (``NETRC``), as afc's provider calls read
    them when its variable's URL holds none: sent as the URL's are, quoted back the same."""
    proxy = WireServer(_quoting_proxy())
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine 127.0.0.1 login studio password {PASSWORD}\n")
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
    assert "(password '<redacted>')" in result.stderr, result.stderr
    files = b"".join(p.read_bytes() for p in afc.cwd.glob("afc.db*") if p.is_file())
    sent = base64.b64encode(f"studio:{PASSWORD}".encode()).decode()
    for text in (result.stderr, files.decode("latin-1")):
        assert PASSWORD not in text and sent[4:20] not in text, text[-2000:]
