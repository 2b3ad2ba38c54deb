"""A real S3 protocol server (moto's server mode) on 127.0.0.1, behind a small HTTP proxy that
injects faults at the wire: 503 SlowDown, 429 with Retry-After, 500, connection resets."""

from __future__ import annotations

import http.client
import re
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from fakeproviders import BackloggedServer

SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)
INTERNAL = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
    b"<Message>We encountered an internal error. Please try again.</Message></Error>"
)
DENIED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
    b"<Message>Access Denied</Message></Error>"
)
NO_SUCH_KEY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>NoSuchKey</Code>'
    b"<Message>The specified key does not exist.</Message></Error>"
)
NO_SUCH_BUCKET = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>NoSuchBucket</Code>'
    b"<Message>The specified bucket does not exist</Message></Error>"
)
EXPIRED_TOKEN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>ExpiredToken</Code>'
    b"<Message>The provided token has expired.</Message></Error>"
)
BAD_DIGEST = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>BadDigest</Code>'
    b"<Message>The SHA256 you specified did not match the calculated checksum.</Message></Error>"
)
SHA256_MISMATCH = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>XAmzContentSHA256Mismatch</Code>'
    b"<Message>The provided 'x-amz-content-sha256' header does not match what was computed."
    b"</Message></Error>"
)
INCOMPLETE_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>IncompleteBody</Code>'
    b"<Message>You did not provide the number of bytes specified by the Content-Length HTTP "
    b"header</Message></Error>"
)
STORAGE_FULL = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>XMinioStorageFull</Code>'
    b"<Message>Storage backend has reached its minimum free drive threshold. Please delete a "
    b"few objects to proceed.</Message></Error>"
)
NOT_IMPLEMENTED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>NotImplemented</Code>'
    b"<Message>A header you provided implies functionality that is not implemented.</Message>"
    b"</Error>"
)
# Backblaze B2's S3 API answers an upload carrying a SHA-256 checksum so (a 400, not a 501)
UNSUPPORTED_HEADER = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InvalidArgument</Code>'
    b"<Message>Unsupported header 'x-amz-checksum-sha256' received for this API call.</Message>"
    b"</Error>"
)
# a store without create-only writes answering a 400 that names the header, not a 501
UNSUPPORTED_CONDITION = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InvalidArgument</Code>'
    b"<Message>Header 'If-None-Match' is not supported for this API call.</Message>"
    b"</Error>"
)
# S3's answer to a multipart completion whose parts are smaller than the store takes (a store
# that wants larger parts than afc's 16 MiB)
ENTITY_TOO_SMALL = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>EntityTooSmall</Code>'
    b"<Message>Your proposed upload is smaller than the minimum allowed object size.</Message>"
    b"</Error>"
)
THROTTLED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>TooManyRequests</Code>'
    b"<Message>Too many requests.</Message></Error>"
)


@dataclass
class Fault:
    method: str  # "PUT", "HEAD", ... or "*"
    path: str  # regular expression on the request path
    # "slowdown" | "429" | "500" | "403" | "404" (NoSuchKey: a store not yet consistent) |
    # "nobucket" (404 NoSuchBucket: the bucket deleted) | "expired" (400 ExpiredToken: a
    # session token run out; a HEAD's answer has no body, a bare 400) | "baddigest" (400
    # BadDigest) | "sha256mismatch" (400 XAmzContentSHA256Mismatch): the bytes damaged on
    # the way, as S3 answers an upload whose body does not match its checksum | "incomplete"
    # (400 IncompleteBody: fewer bytes arrived than Content-Length said) | "notimplemented"
    # (501 NotImplemented: an S3-compatible store without create-only writes or SHA-256
    # checksums) | "unsupported" (400 InvalidArgument 'Unsupported header
    # x-amz-checksum-sha256': Backblaze B2's answer to an upload with a SHA-256 checksum) |
    # "unsupported-inm" (400 InvalidArgument 'Header If-None-Match is not supported') |
    # "full" (507 XMinioStorageFull: a MinIO below its free-drive threshold) | "toosmall"
    # (400 EntityTooSmall: a multipart completion whose parts the store finds too small) |
    # "reset" | "stall"
    kind: str
    times: int  # how many matching requests it hits; -1: all
    retry_after: str | None = None
    after: int = 0  # how many matching requests it lets through first


@dataclass
class FaultPlan:
    faults: list[Fault] = field(default_factory=list)
    seen: list[tuple[str, str]] = field(default_factory=list)
    injected: list[tuple[str, str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # answer ``x-amz-meta-*`` header names in canonical case (``X-Amz-Meta-Afc-Job-Id``), as
    # a Go reverse proxy in front of a store (Traefik, Caddy) or some S3-compatible stores do
    title_case_meta: bool = False
    # a "stall" fault holds its request unanswered until this is set (``release``)
    released: threading.Event = field(default_factory=threading.Event)
    # answer no ``x-amz-checksum-*`` header, as an S3-compatible store that computes no
    # checksums, or reports none on a HEAD (Backblaze B2's and older Ceph's S3 APIs), does
    drop_checksums: bool = False
    # answer an object's GET with its last byte changed: a store, or a proxy in front of it,
    # handing back other bytes than it took
    damage_reads: bool = False

    def add(self, *faults: Fault) -> None:
        with self.lock:
            self.faults.extend(faults)

    def release(self) -> None:
        """Let go of the requests a "stall" fault holds (their connections close unanswered)."""
        self.released.set()

    def answered(self, method: str, path: str) -> None:
        """Called once the real store has answered a forwarded request, before the proxy
        passes the answer on: a subclass may hold it here (the request took effect, the
        client does not know yet)."""

    def clear(self) -> None:
        with self.lock:
            self.faults.clear()
            self.seen.clear()
            self.injected.clear()

    def take(self, method: str, path: str) -> Fault | None:
        with self.lock:
            self.seen.append((method, path))
            for fault in self.faults:
                if (
                    fault.times != 0
                    and fault.method in ("*", method)
                    and re.search(fault.path, path)
                ):
                    if fault.after > 0:
                        fault.after -= 1
                        continue
                    if fault.times > 0:
                        fault.times -= 1
                    self.injected.append((method, path, fault.kind))
                    return fault
        return None


def make_proxy(upstream: tuple[str, int], plan: FaultPlan) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet
            pass

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                raw = b""
                while True:
                    line = self.rfile.readline()
                    raw += line
                    size = int(line.split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while True:  # trailers, then the blank line
                            trailer = self.rfile.readline()
                            raw += trailer
                            if trailer in (b"\r\n", b""):
                                return raw
                    raw += self.rfile.read(size + 2)
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _handle(self):
            body = self._body()
            fault = plan.take(self.command, self.path)
            if fault is not None:
                if fault.kind == "stall":
                    # an endpoint that took the request and never answers (a hung store, a
                    # link gone quiet): the client waits out its own read timeout
                    plan.released.wait(600)
                    self.close_connection = True
                    return
                if fault.kind == "reset":
                    # drop the connection without an answer, as a reset or a dead peer would
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                    )
                    self.close_connection = True
                    self.connection.close()
                    return
                status, payload = {
                    "slowdown": (503, SLOW_DOWN),
                    "429": (429, THROTTLED),
                    "500": (500, INTERNAL),
                    "403": (403, DENIED),
                    "404": (404, NO_SUCH_KEY),
                    "nobucket": (404, NO_SUCH_BUCKET),
                    "expired": (400, EXPIRED_TOKEN),
                    "baddigest": (400, BAD_DIGEST),
                    "sha256mismatch": (400, SHA256_MISMATCH),
                    "incomplete": (400, INCOMPLETE_BODY),
                    "notimplemented": (501, NOT_IMPLEMENTED),
                    "full": (507, STORAGE_FULL),
                    "unsupported": (400, UNSUPPORTED_HEADER),
                    "unsupported-inm": (400, UNSUPPORTED_CONDITION),
                    "toosmall": (400, ENTITY_TOO_SMALL),
                }[fault.kind]
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                if fault.retry_after is not None:
                    self.send_header("Retry-After", fault.retry_after)
                payload = b"" if self.command == "HEAD" else payload
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return
            conn = http.client.HTTPConnection(*upstream, timeout=120)
            headers = {k: v for k, v in self.headers.items()}
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in headers.items():
                conn.putheader(name, value)
            conn.endheaders()
            if body:
                conn.send(body)
            answer = conn.getresponse()
            data = answer.read()
            plan.answered(self.command, self.path)
            if plan.damage_reads and self.command == "GET" and answer.status == 200 and data:
                if "/films/" in self.path and "?" not in self.path:
                    data = data[:-1] + bytes([data[-1] ^ 0xFF])
            self.send_response(answer.status)
            for name, value in answer.getheaders():
                if name.lower() not in (
                    "content-length",
                    "transfer-encoding",
                    "connection",
                    "date",
                    "server",
                ) and not (plan.drop_checksums and name.lower().startswith("x-amz-checksum-")):
                    if plan.title_case_meta and name.lower().startswith("x-amz-meta-"):
                        name = "-".join(part.capitalize() for part in name.split("-"))
                    self.send_header(name, value)
            if self.command == "HEAD":  # no body, but the object's length
                self.send_header("Content-Length", answer.getheader("Content-Length") or "0")
            else:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            conn.close()

        do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _handle

    server = BackloggedServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class ProxiedBucket:
    """A new bucket on moto's server, reached through a fault proxy (``make_proxy``) that
    ``plan`` drives, with the ``afc`` fixture's environment pointed at the proxy:
    ``client`` (boto3, straight to moto), ``bucket``, ``plan``, ``url`` (``s3://bucket/films``)
    and ``proxy`` (shut down by the fixture)."""

    def __init__(self, moto_server: tuple[str, int], afc, plan: FaultPlan, prefix: str) -> None:
        import time

        import boto3
        from botocore.config import Config

        self.plan = plan
        self.proxy = make_proxy(moto_server, plan)
        host, port = self.proxy.server_address[:2]
        afc.env.update(
            {
                "AWS_ENDPOINT_URL_S3": f"http://{host}:{port}",
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_REGION": "us-east-1",
            }
        )
        for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN"):
            afc.env.pop(name, None)
        self.client = boto3.client(
            "s3",
            endpoint_url=f"http://{moto_server[0]}:{moto_server[1]}",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}),
        )
        self.bucket = f"{prefix}-{int(time.time() * 1e6)}"
        self.client.create_bucket(Bucket=self.bucket)
        self.url = f"s3://{self.bucket}/films"
