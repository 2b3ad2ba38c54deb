"""Outside audit 63c: an error answer's body was read whole, up to 256 MiB.

A gateway in front of a provider answering 500 with a 50 MB body (its error page, a dump) had
each such body read, decoded, parsed and copied into the attempt's message: measured, 8 such
OpenAI calls at once peaked at 1.25 GB of memory (about 150 MB a call), so a run at
``--concurrency 100`` met so would be killed by the kernel, every call in flight left possibly
paid. Now only the first MiB of an error answer is read (``transport.MAX_ERROR_ANSWER_BYTES``;
the providers' own error bodies are a few KB) and the connection is closed: the same 8 calls
peak at some 80 MB, and the attempt fails as before, by its status."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler

from conftest import Loopback, manifest

BODY_BYTES = 64 * 1024**2
CHUNK = 64 * 1024


class _HugeErrors(Loopback):
    """An OpenAI base URL whose every answer is a 500 with a 64 MiB JSON error body, counting
    the bytes of it the client took before it closed the connection."""

    def __init__(self) -> None:
        self.sent = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                head = b'{"error": {"type": "server_error", "message": "'
                tail = b'"}}'
                self.send_response(500)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(BODY_BYTES))
                self.end_headers()
                filler = BODY_BYTES - len(head) - len(tail)
                try:
                    self.wfile.write(head)
                    while filler > 0:
                        piece = min(CHUNK, filler)
                        self.wfile.write(b"x" * piece)
                        filler -= piece
                        with outer.lock:
                            outer.sent += piece
                    self.wfile.write(tail)
                except OSError:
                    pass  # the client closed the connection: it read no more

        super().__init__(Handler, "/v1")


def test_an_error_answer_is_read_only_as_far_as_its_first_mib(afc):
    server = _HugeErrors()
    try:
        data = manifest(
            [{"key": "a", "prompt": "a"}],
            rates=[{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}],
        )
        data["defaults"]["chain"] = [{"provider": "openai", "model": "gpt-image-1", "attempts": 1}]
        afc.write_manifest(data)
        env = {"OPENAI_API_KEY": "sk-test-63c", "OPENAI_BASE_URL": server.base}
        run = afc("submit", "manifest.yaml", "--json", env=env)
        assert run.returncode == 1, run.stderr
        assert "Traceback" not in run.stderr, run.stderr
        [job] = json.loads(run.stdout)["jobs"]
        assert job["error"]["class"] == "server", job["error"]
        assert "HTTP 500" in job["error"]["message"], job["error"]
        # the provider's words as far as the head read holds them (``http._head_json``)
        assert "openai: xxxxxxxx" in job["error"]["message"], job["error"]
        assert len(job["error"]["message"]) < 4200, len(job["error"]["message"])
        # before: all 64 MiB was taken; now the first MiB and what the sockets' buffers held
        assert server.sent < 16 * 1024**2, server.sent
    finally:
        server.stop()
