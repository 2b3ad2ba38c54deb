"""A webhook receiver on 127.0.0.1 whose answers a test scripts: status, delay, headers."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from fakeproviders import BackloggedServer


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    at: float
    status: int = 0  # what the receiver answered (bench/chaos.py matches deliveries to it)


@dataclass
class Receiver:
    script: list[tuple[int, float, dict[str, str]]] = field(default_factory=list)
    default: tuple[int, float, dict[str, str]] = (200, 0.0, {})
    received: list[Received] = field(default_factory=list)
    # when set to an unset Event, every POST is held unanswered until the test sets it
    gate: threading.Event | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/hooks/afc"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:  # the script answers requests in the order they arrived
                    scripted = receiver.script.pop(0) if receiver.script else receiver.default
                    headers_in = {k.lower(): v for k, v in self.headers.items()}
                    receiver.received.append(Received(headers_in, body, time.time(), scripted[0]))
                status, delay, headers = scripted
                if receiver.gate is not None:
                    receiver.gate.wait()
                if delay:
                    time.sleep(delay)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = BackloggedServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.gate is not None:
            self.gate.set()
        if self.server:
            self.server.shutdown()
