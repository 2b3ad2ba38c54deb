"""SSL_CERT_FILE naming a file that cannot be read (outside audit 44e): README tells a studio
whose webhook receiver has its own CA to name it in SSL_CERT_FILE, and the provider calls read
it too. A path mistyped (or a file that is no PEM) made every command that posts or calls
end 'afc: [Errno 2] No such file or directory; every job stays resumable: fix it, then run
'afc resume'', exit 1: neither the variable nor the path named, and a drain of webhooks sent
to a run. It is refused before anything is done, naming both, exit 2."""

from __future__ import annotations

import base64

import pytest
from conftest import manifest
from receiver import Receiver

SECRET = "whsec_" + base64.b64encode(b"afc test secret, 32 bytes long!!").decode()


@pytest.fixture
def receiver():
    r = Receiver().start()
    yield r
    r.stop()


@pytest.mark.parametrize("kind", ["missing", "not-pem"])
def test_a_ca_file_that_cannot_be_read_is_named_before_anything_is_done(
    afc, receiver, tmp_path, kind
):
    afc.env["AFC_HOOK_SECRET"] = SECRET
    data = manifest([{"key": "ok", "prompt": "a"}])
    data["webhook"] = {"url": receiver.url, "secret_env": "AFC_HOOK_SECRET", "timeout_s": 2.0}
    afc.write_manifest(data)
    receiver.script = [(503, 0.0, {})]  # the event stays pending
    assert afc("submit", "manifest.yaml").returncode == 0
    (delivery,) = afc.json("webhooks", "list")["deliveries"]
    assert (delivery["status"], delivery["attempts"]) == ("pending", 1)

    ca = tmp_path / "studio-ca.pem"
    if kind == "not-pem":
        ca.write_text("not a certificate\n")
    afc.env["SSL_CERT_FILE"] = str(ca)
    for command in (
        ["webhooks", "deliver"],
        ["webhooks", "replay", delivery["id"]],
        ["resume"],
        ["worker", "--until-idle"],
    ):
        done = afc(*command)
        assert done.returncode == 2, (command, done.stderr)
        assert "SSL_CERT_FILE" in done.stderr and str(ca) in done.stderr, done.stderr
        assert "afc resume" not in done.stderr, done.stderr
    data["jobs"].append({"key": "new", "prompt": "b"})
    afc.write_manifest(data)
    done = afc("submit", "manifest.yaml")
    assert done.returncode == 2 and "SSL_CERT_FILE" in done.stderr, done.stderr
    assert afc.rows("SELECT key FROM jobs ORDER BY key") == [("ok",)]  # nothing admitted
    (after,) = afc.json("webhooks", "list")["deliveries"]
    assert (after["status"], after["attempts"]) == ("pending", 1)  # not re-queued nor tried
    assert len(receiver.received) == 1

    del afc.env["SSL_CERT_FILE"]
    assert afc("webhooks", "replay", delivery["id"]).returncode == 0
    assert [d["status"] for d in afc.json("webhooks", "list")["deliveries"]] == ["delivered"]
