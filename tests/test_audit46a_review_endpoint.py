"""Outside audit 46a: an approval made where the batch's S3 bucket is reached through another
endpoint is refused as a run there is, not told the output is gone.

A batch admitted on a MinIO or R2 bucket records the endpoint it was reached through, and a
submit, resume or worker whose environment reaches the bucket through another one is refused
(exit 2, both endpoints named: README, Storage binding). The approval looks for each output
in its storage first, and made on a reviewer's machine without that endpoint set (AWS's own,
or another store's), it asked a store that holds none of the batch's outputs: "its output
(s3://...) is gone from storage ... Restore the file, or render it again: 'afc cancel frame'
then 'afc retry frame'". The approval is now refused the way a run is, naming the endpoint to
set, nothing decided; with it set, the approval goes through."""

from __future__ import annotations

import pytest
from conftest import manifest


@pytest.fixture(scope="module")
def other_store():
    """A second S3 service (another MinIO, say) that has no bucket of the tests': a process of
    its own (moto's services in one process share their buckets)."""
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(url + "/moto-api/data.json", timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    yield url
    server.terminate()
    server.wait(timeout=10)


def test_an_approval_through_another_endpoint_is_refused_naming_the_batch_s(afc, s3, other_store):
    afc.write_manifest(manifest([{"key": "frame", "prompt": "the style frame", "review": True}]))
    assert afc("submit", "manifest.yaml", "--storage", s3.url).returncode == 0
    recorded = afc.env["AWS_ENDPOINT_URL_S3"]

    refused = afc("review", "approve", "frame", env={"AWS_ENDPOINT_URL_S3": other_store})
    assert refused.returncode == 2, refused.stderr
    said = " ".join(refused.stderr.split())
    assert "is gone from storage" not in said, said
    assert f"through the endpoint {recorded}" in said, said
    assert f"Set AWS_ENDPOINT_URL_S3={recorded}" in said, said
    assert "nothing was decided" in said
    assert afc.rows("SELECT status FROM jobs") == [("awaiting_review",)]
    assert afc.rows("SELECT COUNT(*) FROM reviews") == [(0,)]

    # in the environment the batch was admitted through, it goes through
    approved = afc("review", "approve", "frame")
    assert approved.returncode == 0, approved.stderr
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]
