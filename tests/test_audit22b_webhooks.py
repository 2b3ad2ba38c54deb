"""Outside audit 22 (b) of the webhooks, through the real afc command and a receiver on
127.0.0.1."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import sqlite3
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from conftest import jobs, manifest

SECRET = "whsec_" + base64.b64encode(b"afc test secret, 32 bytes long!!").decode()


def self_signed(folder) -> tuple[str, str]:
    """A certificate for 127.0.0.1 that no CA signed (a studio's own receiver), and its key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "afc test receiver")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "receiver.pem", folder / "receiver.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_path), str(key_path)


def test_a_delivery_that_cannot_connect_says_what_the_connection_met(afc, tmp_path):
    """A receiver down ('Connection refused'), a host name that does not resolve and an https
    receiver whose certificate this host does not trust (a studio's own CA) were all the same
    'connection failed: ConnectError' in afc webhooks list, tried 8 times and then dead: a
    person could not tell a typo from a receiver down from a CA to name (SSL_CERT_FILE).
    The error now carries what the connection met."""
    cert, key = self_signed(tmp_path)
    got: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            got.append(self.rfile.read(int(self.headers["content-length"])))
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        afc.env["AFC_HOOK_SECRET"] = SECRET
        data = manifest(jobs(1))
        url = f"https://127.0.0.1:{server.server_address[1]}/hooks/afc"
        data["webhook"] = {"url": url, "secret_env": "AFC_HOOK_SECRET", "timeout_s": 5}
        afc.write_manifest(data)
        assert afc("submit", "manifest.yaml").returncode == 0
        [row] = afc.json("webhooks", "list")["deliveries"]
        assert row["status"] == "pending" and row["attempts"] >= 1
        assert row["last_error"].startswith("connection failed: ConnectError (")
        assert "CERTIFICATE_VERIFY_FAILED" in row["last_error"], row["last_error"]
        assert got == []
        # what it says is what mends it: the receiver's CA named, the event goes out
        with sqlite3.connect(afc.cwd / "afc.db") as conn:
            conn.execute("UPDATE deliveries SET next_attempt_at = 0")
        sent = afc("webhooks", "deliver", "--json", env={"SSL_CERT_FILE": cert})
        assert sent.returncode == 0, sent.stderr
        assert json.loads(sent.stdout)["delivered"] == 1
        assert len(got) == 1 and json.loads(got[0])["type"] == "job.succeeded"
    finally:
        server.shutdown()
        server.server_close()
