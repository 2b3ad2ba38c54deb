"""Outside audit 46 (c): an S3 endpoint (a proxy in front of the store) that echoes the
request's headers in its error message, the credentials read from a profile file
(``AWS_PROFILE``, an SSO cache, a role: botocore reads them, never the environment). The
session token each request carries was scrubbed only as ``AWS_SESSION_TOKEN``'s value: from
a profile it was shown on stderr, kept in the ledger and posted in the job's webhook event.
Now the token a request sends is a secret as that variable's value is."""

from __future__ import annotations

import json
import sqlite3
import threading
from http.server import BaseHTTPRequestHandler

import pytest
from conftest import manifest
from fakeproviders import BackloggedServer

from afc_cli import secrets

TOKEN = "IQoJb3JpZ2luX2VjEXAMPLEprofileSessionToken0123456789abcdefXYZ"


class EchoingStore(BaseHTTPRequestHandler):
    """The bucket is there (its HEAD 200), no object is (404), and every write is refused
    403, the request's session token and signature quoted back in the message."""

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        if self.command == "HEAD":
            status = 200 if self.path.rstrip("/").count("/") <= 1 else 404
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        said = f"denied: x-amz-security-token={self.headers.get('x-amz-security-token')}"
        body = (
            f"<?xml version='1.0'?><Error><Code>AccessDenied</Code><Message>{said}</Message>"
            "</Error>"
        ).encode()
        self.send_response(403)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def store():
    server = BackloggedServer(("127.0.0.1", 0), EchoingStore)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_profile_s_session_token_echoed_by_the_store_is_shown_nowhere(afc, store, tmp_path):
    credentials = tmp_path / "credentials"
    credentials.write_text(
        "[render]\naws_access_key_id = AKIAEXAMPLEPROFILE\n"
        "aws_secret_access_key = profileSecretKeyExample0123456789abcdefgh\n"
        f"aws_session_token = {TOKEN}\n"
    )
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        afc.env.pop(name, None)
    env = {
        "AWS_SHARED_CREDENTIALS_FILE": str(credentials),
        "AWS_CONFIG_FILE": str(tmp_path / "no-config"),
        "AWS_PROFILE": "render",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_S3": store,
    }
    afc.write_manifest(manifest([{"key": "shot", "prompt": "a lighthouse"}]))
    said = [afc("submit", "manifest.yaml", "--storage", "s3://renders/films", env=env)]
    said += [afc("show", "shot", "--json", env=env), afc("status", "--json", env=env)]
    assert "AccessDenied denied: x-amz-security-token=" in said[0].stderr, said[0].stderr
    conn = sqlite3.connect(afc.cwd / "afc.db")
    dump = "\n".join(conn.iterdump())
    conn.close()
    assert "x-amz-security-token=" in dump
    everything = "\n".join([dump] + [r.stdout + r.stderr for r in said])
    assert "<redacted>" in everything
    assert TOKEN not in everything
    assert TOKEN[:24] not in everything and TOKEN[-24:] not in everything
    json.loads(said[1].stdout)  # still a JSON document


def test_a_value_registered_is_scrubbed_whole_and_in_part(monkeypatch):
    secrets.reset()
    try:
        secrets.register_value(TOKEN)
        secrets.register_value("short")  # under MIN_SECRET_CHARS: ordinary words stay
        out = secrets.scrub(f"echo {TOKEN} and {TOKEN[5:30]} and a short word")
        assert TOKEN[5:30] not in out and "<redacted>" in out, out
        assert out.endswith("and a short word"), out
    finally:
        secrets._extra_values = secrets._extra_values - {TOKEN}
        secrets.reset()
