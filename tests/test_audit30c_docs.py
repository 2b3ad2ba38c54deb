"""Outside audit 30 (c): the documentation against the behaviour, through the real afc
command where the promise is a user's."""

from __future__ import annotations

import base64
import socket

from conftest import jobs, manifest

SECRET = "whsec_" + base64.b64encode(b"afc test secret, 32 bytes long!!").decode()


def test_a_delivery_to_a_receiver_that_is_down_says_the_connection_was_refused(afc):
    """README ("Webhooks", At least once): a delivery's `last_error` says what the connection
    met: refused, a host name that does not resolve, a certificate this host does not trust.
    A receiver that was down (nothing listening on its port) read 'connection failed:
    ConnectError (All connection attempts failed)', the words httpx's connector uses for
    every failed connect, which a person cannot tell from a network that drops the packets;
    the refusal was there, in the error's cause."""
    closed = socket.socket()  # bound, not listening: a connect to it is refused, no race
    closed.bind(("127.0.0.1", 0))
    try:
        afc.env["AFC_HOOK_SECRET"] = SECRET
        data = manifest(jobs(1))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}/hooks/afc"
        data["webhook"] = {"url": url, "secret_env": "AFC_HOOK_SECRET", "timeout_s": 5}
        afc.write_manifest(data)
        assert afc("submit", "manifest.yaml").returncode == 0
        [row] = afc.json("webhooks", "list")["deliveries"]
        assert row["status"] == "pending", row
        assert row["last_error"].startswith("connection failed: ConnectError ("), row
        assert "refused" in row["last_error"].lower(), row["last_error"]
    finally:
        closed.close()
