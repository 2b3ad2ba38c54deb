"""A TLS failure reaching an S3-compatible store says what a person can mend: the CA bundle
AWS_CA_BUNDLE names that is not there (it was "SSL validation failed ... [Errno 2] No such
file or directory", neither the variable nor the path named), or a certificate this host
does not trust (where to name the store's certificate authority)."""

from __future__ import annotations

import socket
import ssl

from botocore.exceptions import SSLError
from conftest import jobs, manifest

from afc_cli.storage.s3 import _tls_problem


def test_a_missing_ca_bundle_is_named_before_any_render(afc, tmp_path):
    """An https endpoint that accepts connections: the handshake never starts, the bundle
    cannot be read. The check before the run says so (exit 1), nothing admitted."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=16)  # the kernel accepts
    port = listener.getsockname()[1]
    missing = tmp_path / "no-such-ca.pem"
    afc.write_manifest(manifest(jobs(2)))
    try:
        result = afc(
            "submit",
            "manifest.yaml",
            "--storage",
            "s3://renders/films",
            env={
                "AWS_ENDPOINT_URL": f"https://127.0.0.1:{port}",
                "AWS_CA_BUNDLE": str(missing),
                "AWS_ACCESS_KEY_ID": "test",
                "AWS_SECRET_ACCESS_KEY": "test",
                "AWS_DEFAULT_REGION": "us-east-1",
            },
        )
    finally:
        listener.close()
    assert result.returncode == 1, result.stderr
    assert f"AWS_CA_BUNDLE names '{missing}', which is not a readable file" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (afc.cwd / "afc.db").exists() or not afc.rows("SELECT id FROM attempts")


def test_an_untrusted_certificate_says_where_to_name_the_authority(monkeypatch):
    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)
    failed = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] self-signed")
    said = _tls_problem(SSLError(endpoint_url="https://minio:9000", error=failed))
    assert "does not trust the store's certificate: AWS_CA_BUNDLE" in said
    other = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")
    assert _tls_problem(SSLError(endpoint_url="https://minio:9000", error=other)) == ""
    assert _tls_problem(OSError("not a TLS failure")) == ""
