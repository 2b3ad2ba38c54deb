"""Outside audit 34g: ``afc serve``'s full-size view of an S3 output whose read breaks off
mid-way (the connection to the store reset after the first megabytes: an endpoint restarted,
a load balancer's idle cut, a flaky VPN).

Before: the response had started (its first chunk sent), so the StorageError the S3 read
raised went up through Starlette to uvicorn, which printed "Exception in ASGI application"
and two chained tracebacks (some 70 lines) on serve's stderr for each such view. Now the
read's failure is one line on stderr naming the page and the output, as a page that cannot
read the ledger is, and the response is still broken off (the browser sees a download cut
short, never a whole picture of fewer bytes)."""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler

import pytest
from browser import Served
from conftest import manifest
from fakeproviders import BackloggedServer
from test_providers import FAST, MODELS, RATES

MIB = 1 << 20


def cutting_proxy(upstream: tuple[str, int], keep: int) -> BackloggedServer:
    """A proxy to moto that answers an object's GET with its whole Content-Length but only
    its first ``keep`` bytes, then closes the connection: a read broken off mid-way."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet
            pass

        def _handle(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            conn = http.client.HTTPConnection(*upstream, timeout=60)
            conn.request(self.command, self.path, body=body or None, headers=dict(self.headers))
            answer = conn.getresponse()
            data = answer.read()
            conn.close()
            self.send_response(answer.status)
            for name, value in answer.getheaders():
                if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            cut = self.command == "GET" and len(data) > keep and answer.status == 200
            if self.command != "HEAD":
                self.wfile.write(data[:keep] if cut else data)
            if cut:
                self.wfile.flush()
                self.close_connection = True

        do_GET = do_HEAD = do_PUT = do_POST = _handle

    server = BackloggedServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def served_behind_a_cut(afc, s3, moto_server) -> tuple[str, BackloggedServer, Served]:
    """A 7 MiB Replicate output stored in moto, and ``afc serve`` reaching the store through
    ``cutting_proxy`` (the read broken off at 6 MiB, past the first chunks sent: the view
    reads up to 4 MiB ahead, to check a picture whole against its SHA-256 before its answer
    starts): the job's id, the proxy and the server (both stopped by the caller)."""
    data = manifest([{"key": "j0", "prompt": "big-out-7 shot"}], rates=RATES)
    data["defaults"]["chain"] = [
        {"provider": "replicate", "model": MODELS["replicate"], "attempts": 2, "backoff": FAST}
    ]
    afc.write_manifest(data)
    afc("submit", "manifest.yaml", "--storage", s3.url)
    (job_id, size, status), *_ = afc.rows("SELECT id, output_size, status FROM jobs")
    assert status == "succeeded" and size == 7 * MIB
    proxy = cutting_proxy(moto_server, keep=6 * MIB)
    host, port = proxy.server_address[:2]
    return job_id, proxy, Served(afc, env={"AWS_ENDPOINT_URL_S3": f"http://{host}:{port}"})


def test_a_full_size_view_cut_off_by_the_store_is_one_line_not_a_traceback(
    afc, fake, s3, moto_server
):
    job_id, proxy, served = served_behind_a_cut(afc, s3, moto_server)
    try:
        address = served.url.removeprefix("http://").rstrip("/")
        conn = http.client.HTTPConnection(address, timeout=60)
        conn.request("GET", f"/output/{job_id}")
        answer = conn.getresponse()
        assert answer.status == 200  # its first megabytes were sent before the read broke off
        # broken off, never ended as a whole response of fewer bytes: a browser shows a cut
        # download, not a picture that looks complete
        with pytest.raises(http.client.IncompleteRead):
            answer.read()
        conn.close()
        # the server is still up and answers the next page
        conn = http.client.HTTPConnection(address, timeout=60)
        conn.request("GET", "/")
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        code, stderr = served.stop()
        proxy.shutdown()
    assert code == 0 and "serve stopped" in stderr
    assert "Traceback" not in stderr and "Exception in ASGI" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if f"/output/{job_id}" in line]
    assert len(lines) == 1, stderr
    said = f"afc: serve: /output/{job_id}: the full-size view was cut short: cannot read s3://"
    assert lines[0].startswith(said) and "j0.png" in lines[0], lines


def test_a_head_of_a_full_size_view_reads_no_more_than_its_first_chunk(afc, fake, s3, moto_server):
    """'curl -I' of an output (a HEAD) streamed the whole object from storage, for uvicorn to
    drop: here the read reached the store's cut at 2 MiB and said so. Its headers only now."""
    job_id, proxy, served = served_behind_a_cut(afc, s3, moto_server)
    try:
        address = served.url.removeprefix("http://").rstrip("/")
        conn = http.client.HTTPConnection(address, timeout=60)
        conn.request("HEAD", f"/output/{job_id}")
        answer = conn.getresponse()
        answer.read()
        assert answer.status == 200
        assert answer.getheader("content-type") == "image/png"
        assert answer.getheader("content-security-policy").startswith("sandbox")
        assert answer.getheader("content-length") is None
        # the next request on the same connection is answered once the HEAD's response has
        # ended: streamed, it read on to the store's cut, which broke the connection off
        conn.request("GET", "/")
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        code, stderr = served.stop()
        proxy.shutdown()
    assert code == 0 and "cut short" not in stderr, stderr
