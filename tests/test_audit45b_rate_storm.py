"""A provider's 429s slow the whole run down, not each job alone (outside audit 45b).

A studio's overnight batch at ``--concurrency 200`` against a provider that takes 40 calls at
once: each job backed off on its own 429, but its slot went at once to a job not yet begun,
so the provider was asked 200 at a time all night. 3,000 jobs (renders of 1-3 s) ended 2,624
failed ``rate_limited`` in 21 s, every job's three attempts spent on 429s, 8,300 429s sent
for 376 renders. Now a run keeps no more calls of a provider in flight than it took beside
its last 429 (``pipeline.ProviderPace``): the same batch rendered all 3,000 in 154 s (its
floor at 40 at once: 150 s), with 232 429s.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler

from conftest import Loopback, manifest

from afc_cli.providers.local import render_png


class BusyProvider(Loopback):
    """OpenAI's images endpoint taking at most ``capacity`` calls at once (each rendered in
    ``render_s``), answering any call beyond them 429 at once, as a provider's concurrency
    limit does."""

    def __init__(self, capacity: int, render_s: float) -> None:
        self.capacity, self.render_s = capacity, render_s
        self.lock = threading.Lock()
        self.in_hand = 0
        self.rendered = 0
        self.refused = 0
        png = base64.b64encode(render_png("busy", 8, 8)).decode()
        busy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with busy.lock:
                    taken = busy.in_hand < busy.capacity
                    if taken:
                        busy.in_hand += 1
                    else:
                        busy.refused += 1
                if not taken:
                    body = {
                        "error": {
                            "message": "Rate limit exceeded",
                            "type": "requests",
                            "code": "rate_limit_exceeded",
                        }
                    }
                    return self.reply(429, body, {"Retry-After": "0"})
                time.sleep(busy.render_s)  # the render
                with busy.lock:
                    busy.in_hand -= 1
                    busy.rendered += 1
                body = {
                    "created": int(time.time()),
                    "data": [{"b64_json": png}],
                    "usage": {"input_tokens": 10, "output_tokens": 100},
                }
                self.reply(200, body, {})

            def reply(self, status, body, headers):
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(raw)

        super().__init__(Handler, "/v1")


def test_a_run_wider_than_its_provider_takes_spends_no_job_on_429s(afc):
    provider = BusyProvider(capacity=4, render_s=0.1)
    try:
        data = manifest([{"key": f"shot-{i:02d}", "prompt": f"shot {i}"} for i in range(40)])
        entry = {"provider": "openai", "model": "gpt-image-1", "attempts": 5}
        data["defaults"]["chain"] = [{**entry, "backoff": {"base": 0.01, "cap": 0.05}}]
        data["rates"] = [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}]
        afc.write_manifest(data)
        env = {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": provider.base}
        run = afc("submit", "manifest.yaml", "--concurrency", "20", "-q", env=env)
        statuses = dict(afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status"))
        # before: 4 to 19 of the 40 failed rate_limited, 55 to 132 429s for their renders
        assert statuses == {"succeeded": 40}, (statuses, provider.refused, run.stderr[-500:])
        assert run.returncode == 0
        assert provider.rendered == 40
        # most of the first wave of 20 refused, then about one a round of 4 calls: 11 to 15
        assert provider.refused <= 30, provider.refused
        failed = afc.rows("SELECT COUNT(*) FROM attempts WHERE error_class = 'rate_limited'")
        assert failed == [(provider.refused,)], "every 429 is an attempt row, free"
    finally:
        provider.stop()
