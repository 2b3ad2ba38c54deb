"""Fake OpenAI Images, Replicate, fal queue and Gemini servers on 127.0.0.1, answering in each
API's wire format (status codes, JSON bodies, headers). The prompt picks a behaviour; the
server counts every request so tests can prove what was (not) paid for twice."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import socket
import threading
import time
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from afc_cli.providers.local import render_png

KEYS = {
    "OPENAI_API_KEY": "sk-test-openai-0123456789",
    "REPLICATE_API_TOKEN": "r8_test_replicate_0123456789",
    "FAL_KEY": "fal-test-key-0123456789",
    "GEMINI_API_KEY": "AIza-test-gemini-0123456789",
}
# a "cdn-outage" prompt's output answers 503 to its first downloads: more than two rounds of
# FETCH_TRIES (afc_cli/providers/http.py), so only later rounds get it
CDN_OUTAGE = 9
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# how long a "cancel-unanswered" fal request's cancel takes to answer (past afc's bound on it,
# afc_cli/pipeline.py CANCEL_WAIT_S)
CANCEL_UNANSWERED_S = 12.0
# how long a "cdn-slow" prompt's output takes to answer each of its 503s
CDN_SLOW_S = 0.4
# a "poll-outage" prompt's first polls answer 503 (Replicate, fal): twelve intervals of
# AFC_POLL_S 0.05, past the five a run waits before it says the provider's polls all fail
OUTAGE_POLLS = 12


class BackloggedServer(ThreadingHTTPServer):
    """The fakes' server (and the test suite's other HTTP fakes'). Its listen backlog holds a run's calls at once: socketserver's
    default of 5 overflowed at 100 concurrent connects, and the kernel dropped the SYNs past
    it, which the client sends again only after 1, 3, 7, 15... s (a 100-call test took from 3
    to over 120 s, by luck)."""

    request_queue_size = 1024
    daemon_threads = True


class FakeProviders:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.predictions: dict[str, dict] = {}
        self.fal: dict[str, dict] = {}
        self.released = threading.Event()
        # set: the key a "poll-401" prompt's polls were refused for is valid again (a person
        # put a working key in its place), and those polls answer as any other
        self.key_restored = threading.Event()
        self.seen_once: set[str] = set()
        self.cancels: list[str] = []
        # cancels being answered at this moment, and the most at once ("slow-cancel" prompts'
        # cancels take a moment to answer, as a busy API's do)
        self.cancels_now = 0
        self.cancels_at_once = 0
        self.server: ThreadingHTTPServer | None = None
        # reference images received, by prompt: [(field, media type, sha256 of the bytes)]
        self.inputs: dict[str, list[tuple[str, str, str]]] = {}
        # every JSON body POSTed to OpenAI's /images/generations, as it arrived
        self.openai_bodies: list[dict] = []
        # the generationConfig of every Gemini call, by prompt
        self.gemini_configs: dict[str, object] = {}
        # the form fields (all but the image parts) of every OpenAI /images/edits call
        self.openai_edit_fields: list[dict] = []
        # outputs whose first download answers 503 (a "flaky-download" prompt's)
        self.flaky_files: set[str] = set()
        # outputs out of reach for a while (503s): a "cdn-outage" prompt's for its first
        # CDN_OUTAGE downloads, a "cdn-held" prompt's until ``cdn_back`` is set
        self.down_files: dict[str, int | None] = {}
        # outputs whose 503s come slowly (a "cdn-slow" prompt's: a gateway's own timeout)
        self.slow_files: set[str] = set()
        self.cdn_back = threading.Event()
        # outputs the provider let go (404, as an expired DALL-E URL answers)
        self.gone_files: set[str] = set()
        # the image format a model answers when its input names no ``output_format``, as the
        # real ones do (Replicate's flux-1.1-pro answers WebP, fal's flux/dev JPEG): a model
        # named here answers that format, or the one its input asks for; every other model
        # answers PNG, whatever it is asked
        self.model_formats: dict[str, str] = {}
        # outputs served gzip-encoded, this many bytes once decoded (a "big-out-N" prompt's:
        # N MiB), and the encoded bodies by size
        self.big_files: dict[str, int] = {}
        self.gzipped: dict[int, bytes] = {}
        # outputs whose first download says a Content-Length shorter than the body it sends
        # (a "cut-download" prompt's): the rest follows after the answer has ended
        self.cut_files: set[str] = set()
        # every generation request: (time it arrived, provider, prompt, billed); ``billed`` is
        # True once the provider has done (and charges for) the work, whatever the client hears
        self.log: list[tuple[float, str, str, bool]] = []

    # --- plumbing ---------------------------------------------------------------------------

    @property
    def base(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def env(self) -> dict[str, str]:
        return {
            **KEYS,
            "OPENAI_BASE_URL": f"{self.base}/v1",
            "REPLICATE_BASE_URL": f"{self.base}/v1",
            "FAL_QUEUE_URL": self.base,
            "GEMINI_BASE_URL": f"{self.base}/v1beta",
            "AFC_POLL_S": "0.05",
        }

    def cdn_outage(self, prompt: str, path: str) -> None:
        """Make ``path`` (an output's) out of reach for a while, as its prompt asks."""
        with self.lock:
            if path in self.down_files:
                return
            if "cdn-outage" in prompt:
                self.down_files[path] = CDN_OUTAGE
            elif "cdn-held" in prompt:
                self.down_files[path] = None
            elif "cdn-slow" in prompt:
                self.down_files[path] = None
                self.slow_files.add(path)

    def answered_format(self, model: str, model_input: object) -> str | None:
        """The file extension of the image ``model`` answers for ``model_input``, when the
        model is one of ``model_formats`` (its default, else the input's ``output_format``);
        None for any other model."""
        default = self.model_formats.get(model)
        if default is None:
            return None
        asked = model_input.get("output_format") if isinstance(model_input, dict) else None
        return {"jpg": "jpeg"}.get(asked or default, asked or default)

    def first_time(self, tag: str) -> bool:
        with self.lock:
            if tag in self.seen_once:
                return False
            self.seen_once.add(tag)
            return True

    def record(self, provider: str, prompt: str, billed: bool, at: float | None = None) -> None:
        """Log a generation request (``at``: when it arrived, default now)."""
        with self.lock:
            self.log.append((at or time.time(), provider, prompt, billed))

    def count(self, name: str) -> None:
        with self.lock:
            self.counts[name] += 1

    def start(self) -> FakeProviders:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def reply(self, status, body=None, headers=None, raw=None, ctype="application/json"):
                payload = raw if raw is not None else json.dumps(body or {}).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def body(self):
                length = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(length) or b"{}") if length else {}

            def do_GET(self):
                fake.route(self, "GET")

            def do_POST(self):
                fake.route(self, "POST")

            def do_PUT(self):
                fake.route(self, "PUT")

        self.server = BackloggedServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.released.set()
        if self.server:
            self.server.shutdown()

    def gzipped_output(self, size: int) -> bytes:
        """A PNG signature and zeros, ``size`` bytes in all, gzip-compressed (made once)."""
        with self.lock:
            if size not in self.gzipped:
                self.gzipped[size] = big_output_gzip(size)
            return self.gzipped[size]

    # --- routing --------------------------------------------------------------------------------

    def route(self, h, method: str) -> None:
        path = h.path.split("?")[0]
        if path.startswith("/files/"):
            self.count("download")
            if path in self.gone_files:
                return h.reply(404, raw=b"<Error>BlobNotFound</Error>", ctype="application/xml")
            if "cdn-down" in path:  # an output URL that never answers
                return h.reply(
                    503, raw=b"<html>503</html>", ctype="text/html", headers={"Retry-After": "99"}
                )
            with self.lock:
                left = self.down_files.get(path, 0)
                down = left is None and not self.cdn_back.is_set() or bool(left)
                if left:
                    self.down_files[path] = left - 1
            if down:
                self.count("download_refused")
                if path in self.slow_files:
                    time.sleep(CDN_SLOW_S)
                return h.reply(503, raw=b"<html>503 Service Unavailable</html>", ctype="text/html")
            if path in self.flaky_files and self.first_time(f"download {path}"):
                return h.reply(503, raw=b"<html>503 Service Unavailable</html>", ctype="text/html")
            if path in self.cut_files and self.first_time(f"cut {path}"):
                return cut_reply(h, render_png(path, 32, 32))
            if path in self.big_files:  # a video-sized output, sent gzip-encoded
                return h.reply(
                    200,
                    raw=self.gzipped_output(self.big_files[path]),
                    ctype="image/png",
                    headers={"Content-Encoding": "gzip"},
                )
            if path.endswith(".webp"):  # a model answering WebP (Replicate's flux, by default)
                return h.reply(200, raw=render_webp(), ctype="image/webp")
            if path.endswith((".jpg", ".jpeg")):  # a model answering JPEG (fal's flux/dev's)
                return h.reply(200, raw=render_jpeg(), ctype="image/jpeg")
            if path.endswith(".mp4"):  # a video model's clip
                return h.reply(200, raw=render_mp4(), ctype="video/mp4")
            return h.reply(200, raw=render_png(path, 32, 32), ctype="image/png")
        if method == "POST" and path == "/v1/images/generations":
            return self.openai(h)
        if method == "POST" and path == "/v1/images/edits":
            return self.openai_edits(h)
        if method == "POST" and re.fullmatch(r"/v1/models/[^/]+/[^/]+/predictions", path):
            return self.replicate_submit(h)
        if method == "POST" and path == "/v1/predictions":  # a model version's: {version, input}
            return self.replicate_submit(h)
        if m := re.fullmatch(r"/v1/predictions/([^/]+)", path):
            return self.replicate_get(h, m.group(1))
        if method == "POST" and (m := re.fullmatch(r"/v1/predictions/([^/]+)/cancel", path)):
            return self.replicate_cancel(h, m.group(1))
        if method == "POST" and (
            m := re.fullmatch(r"/v1beta/models/([^/:]+):generateContent", path)
        ):
            return self.gemini(h, m.group(1))
        if m := re.fullmatch(r"/fal-ai/flux/requests/([^/]+)(/status|/cancel)?", path):
            return self.fal_request(h, method, m.group(1), m.group(2) or "")
        if method == "POST" and path.startswith("/fal-ai/"):
            return self.fal_submit(h, path[1:])
        h.reply(404, {"detail": "Not found"})

    # --- OpenAI ---------------------------------------------------------------------------

    def openai(self, h) -> None:
        self.count("openai")
        body = h.body()
        if h.headers.get("Authorization") != f"Bearer {KEYS['OPENAI_API_KEY']}":
            return h.reply(
                401,
                {
                    "error": {
                        "message": "Incorrect API key provided: sk-...",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": "invalid_api_key",
                    }
                },
            )
        prompt = body.get("prompt", "")
        arrived = time.time()
        self.record("openai", prompt, False, arrived)
        with self.lock:
            self.openai_bodies.append(body)
        dalle = str(body.get("model", "")).startswith("dall-e-")
        if "response_format" in body and not dalle:  # as gpt-image models answer it
            error = _openai_invalid("Unknown parameter: 'response_format'.", "response_format")
            error["error"]["code"] = "unknown_parameter"
            return h.reply(400, error)
        if "echo-key" in prompt:  # as OpenAI does for a revoked key: the header, quoted back
            auth = h.headers.get("Authorization", "")
            if "echo-key-cr" in prompt:  # in lines of ten broken by a bare CR (old Mac's)
                auth = "\r".join(auth[i : i + 10] for i in range(0, len(auth), 10))
            return h.reply(
                401,
                {
                    "error": {
                        "message": "Incorrect API key provided: "
                        f"{auth}. You can find your API key at "
                        "https://platform.openai.com/account/api-keys.",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": "invalid_api_key",
                    }
                },
            )
        if "rate-limit" in prompt and self.first_time(prompt):
            return h.reply(
                429,
                {
                    "error": {
                        "message": "Rate limit exceeded for images per minute",
                        "type": "requests",
                        "param": None,
                        "code": "rate_limit_exceeded",
                    }
                },
                headers={
                    "Retry-After": "0",
                    "x-ratelimit-reset-requests": "20ms",
                    "x-ratelimit-limit-requests": "5",
                    "x-ratelimit-remaining-requests": "0",
                },
            )
        if "token-limit" in prompt and self.first_time(prompt):
            # gpt-image's tokens-per-minute limit: the requests' limit has room (its reset
            # is a moment away), the tokens' resets later, as OpenAI answers it
            return h.reply(
                429,
                {
                    "error": {
                        "message": "Rate limit reached for gpt-image-1 in organization org-x on "
                        "tokens per min (TPM): Limit 40000, Used 38000, Requested 4160. Please "
                        "try again in 3.24s.",
                        "type": "tokens",
                        "param": None,
                        "code": "rate_limit_exceeded",
                    }
                },
                headers={
                    "x-ratelimit-reset-requests": "6ms",
                    "x-ratelimit-remaining-requests": "49",
                    "x-ratelimit-reset-tokens": "3.24s",
                    "x-ratelimit-remaining-tokens": "2000",
                },
            )
        if "conflict-once" in prompt and self.first_time(prompt):  # a 409, sent again: OK
            return h.reply(
                409,
                {
                    "error": {
                        "message": "The request conflicted with another; please retry.",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": None,
                    }
                },
            )
        if "overloaded-once" in prompt and self.first_time(prompt):  # says when to return
            return h.reply(
                503,
                {
                    "error": {
                        "message": "The engine is currently overloaded, please try again later",
                        "type": "server_error",
                        "param": None,
                        "code": None,
                    }
                },
                headers={"Retry-After": "2", "x-ratelimit-reset-requests": "6m0s"},
            )
        if "request-timeout-once" in prompt and self.first_time(prompt):
            return h.reply(408, raw=b"Request Timeout", ctype="text/plain")
        if "billing-inactive" in prompt:  # an account without billing: a 429, not a rate
            return h.reply(
                429,
                {
                    "error": {
                        "message": "Your account is not active, please check your billing "
                        "details on our website.",
                        "type": "billing_not_active",
                        "param": None,
                        "code": "billing_not_active",
                    }
                },
            )
        if "hard-limit" in prompt:  # the account's spending limit reached: a 400 (DALL-E's)
            return h.reply(
                400,
                {
                    "error": {
                        "message": "Billing hard limit has been reached",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": "billing_hard_limit_reached",
                    }
                },
            )
        if "quota" in prompt:
            return h.reply(
                429,
                {
                    "error": {
                        "message": "You exceeded your current quota",
                        "type": "insufficient_quota",
                        "param": None,
                        "code": "insufficient_quota",
                    }
                },
            )
        if "safety-nocode" in prompt:  # DALL-E's safety rejection as it came without a code
            return h.reply(
                400,
                {
                    "error": {
                        "message": "Your request was rejected as a result of our safety system. "
                        "Your prompt may contain text that is not allowed by our safety system.",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": None,
                    }
                },
            )
        if "safety-gateway" in prompt:  # the same, as a gateway passes it on: no error wrapper
            return h.reply(
                400,
                {
                    "message": "Your request was rejected as a result of our safety system. "
                    "Your prompt may contain text that is not allowed by our safety system. "
                    "(request id: 20250814152832642668801wKakdzZB)"
                },
            )
        if "moderation" in prompt:
            return h.reply(
                400,
                {
                    "error": {
                        "message": "Your request was rejected by the safety system.",
                        "type": "image_generation_user_error",
                        "param": None,
                        "code": "moderation_blocked",
                    }
                },
            )
        if "bad-size" in prompt:
            return h.reply(
                400,
                {
                    "error": {
                        "message": "Invalid value for size",
                        "type": "invalid_request_error",
                        "param": "size",
                        "code": None,
                    }
                },
            )
        if "boom" in prompt:
            return h.reply(
                500,
                {
                    "error": {
                        "message": "The server had an error",
                        "type": "server_error",
                        "param": None,
                        "code": None,
                    }
                },
            )
        if m := re.search(r"slow-(\d+(?:\.\d+)?)s", prompt):
            time.sleep(float(m.group(1)))
        elif "slow" in prompt:
            time.sleep(1.0)
        # the generation is done: OpenAI bills it now, whether or not the client still listens
        self.count("openai_billed")
        self.record("openai", prompt, True, arrived)
        headers = {"x-request-id": f"req_{uuid.uuid4().hex[:12]}"}
        if dalle and body.get("response_format") == "b64_json":  # DALL-E: the image, no usage
            image = base64.b64encode(render_png(prompt, 32, 32)).decode()
            return h.reply(200, {"created": 1, "data": [{"b64_json": image}]}, headers=headers)
        if "dalle-url" in prompt:
            path = f"/files/d-{uuid.uuid4().hex[:8]}.png" if "cdn-" in prompt else "/files/d.png"
            self.cdn_outage(prompt, path)
            if big := re.search(r"big-out-(\d+)", prompt):  # N MiB, sent gzip-encoded
                path = f"/files/d-{uuid.uuid4().hex[:8]}.png"
                self.big_files[path] = int(big.group(1)) << 20
            return h.reply(
                200, {"created": 1, "data": [{"url": f"{self.base}{path}"}]}, headers=headers
            )
        image = base64.b64encode(render_png(prompt, 32, 32)).decode()
        usage = {
            "input_tokens": 50,
            "output_tokens": 4160,
            "total_tokens": 4210,
            "input_tokens_details": {"text_tokens": 50, "image_tokens": 0},
        }
        if "cut-body" in prompt:  # paid, then the connection drops halfway through the body
            payload = json.dumps({"created": 1, "data": [{"b64_json": "A" * 4000}]}).encode()
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("x-request-id", "req_cut_0123456789")
            h.send_header("Content-Length", str(len(payload)))
            h.end_headers()
            h.wfile.write(payload[: len(payload) // 2])
            h.wfile.flush()
            h.close_connection = True
            return None
        if "paid-echo" in prompt:  # a paid answer quoting the key in its id and its usage
            auth = h.headers.get("Authorization", "")
            headers = {"x-request-id": auth}
            usage = {**usage, "input_tokens": auth, "note": [auth.upper()]}
        if "odd-usage" in prompt:  # a paid answer whose counts are not numbers
            usage = {"input_tokens": "fifty", "output_tokens": float("nan"), "total_tokens": []}
        if "empty-b64" in prompt:  # a paid answer whose base64 decodes to no bytes at all
            return h.reply(
                200, {"created": 1, "data": [{"b64_json": "===="}], "usage": usage}, headers=headers
            )
        if "no-image" in prompt:  # a paid answer (its usage, its id) holding no image at all
            return h.reply(200, {"created": 1, "data": [], "usage": usage}, headers=headers)
        if "b64-data-url" in prompt:  # a gateway's: the image's base64 as a data URL
            media = "jpeg" if "jpeg" in prompt else "png"
            image = f"data:image/{media};base64,{image}"
        if "b64-noise" in prompt:  # a gateway's: base64 with characters that are not base64
            image = f"{image[:40]}!*{image[40:-8]}~~~~{image[-8:]}"
        if "b64-text" in prompt or "b64-cut" in prompt:  # base64 of no image, or of a cut one
            image = bad_image_b64(prompt)
        if "garbled" in prompt:  # a paid answer whose image is not base64 (and "data" items odd)
            return h.reply(
                200, {"created": 1, "data": [{"b64_json": "QUJ"}], "usage": usage}, headers=headers
            )
        # ``n`` images, each billed (their output tokens with them), as OpenAI answers
        n = body.get("n") if isinstance(body.get("n"), int) else 1
        if n > 1:
            usage = {**usage, "output_tokens": 4160 * n, "total_tokens": 50 + 4160 * n}
        h.reply(
            200, {"created": 1, "data": [{"b64_json": image}] * n, "usage": usage}, headers=headers
        )

    def openai_edits(self, h) -> None:
        """``POST /v1/images/edits``: multipart form data, the fields as form fields and each
        reference image as an ``image[]`` file part (PNG, JPEG or WebP), as OpenAI takes it."""
        import email.parser
        import email.policy

        self.count("openai_edits")
        if h.headers.get("Authorization") != f"Bearer {KEYS['OPENAI_API_KEY']}":
            return h.reply(401, {"error": {"message": "bad key", "code": "invalid_api_key"}})
        ctype = h.headers.get("Content-Type", "")
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length)
        if not ctype.startswith("multipart/form-data"):
            return h.reply(400, _openai_invalid("expected multipart/form-data", None))
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {ctype}\r\n\r\n".encode() + raw
        )
        fields, images = {}, []
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            if part.get_filename() is None:
                fields[name] = part.get_content()
                continue
            data = part.get_payload(decode=True)
            if name not in ("image[]", "image") or part.get_content_type() not in IMAGE_TYPES:
                return h.reply(400, _openai_invalid(f"Invalid file {name!r}", "image"))
            images.append((name, part.get_content_type(), hashlib.sha256(data).hexdigest()))
        if not images or "prompt" not in fields or "model" not in fields:
            return h.reply(400, _openai_invalid("image, prompt and model are required", "image"))
        # gpt-image takes ``image[]`` parts; dall-e-2 one ``image`` file, and refuses the array
        dalle = fields["model"].startswith("dall-e-")
        if {name for name, _, _ in images} != {"image" if dalle else "image[]"}:
            error = _openai_invalid(
                "Invalid type for 'image': expected a file, but got an array instead."
                if dalle
                else "Invalid file 'image'",
                "image",
            )
            error["error"]["code"] = "invalid_type"
            return h.reply(400, error)
        self.inputs[fields["prompt"]] = images
        with self.lock:
            self.openai_edit_fields.append(fields)
        self.record("openai", fields["prompt"], False)
        if "unreadable-image" in fields["prompt"]:
            # a reference image gpt-image cannot read: an input error under the type its
            # moderation blocks share, refused before anything is made
            return h.reply(
                400,
                {
                    "error": {
                        "message": "Invalid image file or mode for image 1, please check your "
                        "image file.",
                        "type": "image_generation_user_error",
                        "param": "",
                        "code": "invalid_image_file",
                    }
                },
            )
        self.count("openai_billed")
        self.record("openai", fields["prompt"], True)
        image = base64.b64encode(render_png(fields["prompt"] + str(images), 32, 32)).decode()
        if dalle:  # DALL-E: the image (asked for as b64_json), no usage
            return h.reply(200, {"created": 1, "data": [{"b64_json": image}]})
        h.reply(
            200,
            {
                "created": 1,
                "data": [{"b64_json": image}],
                # the reference images' input tokens among the input, as gpt-image reports
                "usage": {
                    "input_tokens": 70 + 323 * len(images),
                    "input_tokens_details": {"text_tokens": 70, "image_tokens": 323 * len(images)},
                    "output_tokens": 4160,
                    "total_tokens": 4230 + 323 * len(images),
                },
            },
        )

    def record_data_uris(self, prompt: str, fields: dict) -> str | None:
        """Reference images sent as data URIs in JSON fields: recorded by prompt; a malformed
        one is the reason to refuse the request."""
        for name, value in fields.items():
            for item in value if isinstance(value, list) else [value]:
                if not (isinstance(item, str) and item.startswith("data:")):
                    continue
                head, _, payload = item.partition(",")
                mime = head[len("data:") :].removesuffix(";base64")
                if not head.endswith(";base64") or mime not in IMAGE_TYPES:
                    return f"{name}: not a base64 image data URI"
                data = base64.b64decode(payload, validate=True)
                self.inputs.setdefault(prompt, []).append(
                    (name, mime, hashlib.sha256(data).hexdigest())
                )
        return None

    # --- Replicate ------------------------------------------------------------------------

    def replicate_submit(self, h) -> None:
        self.count("replicate_submit")
        body = h.body()
        if h.headers.get("Authorization") != f"Bearer {KEYS['REPLICATE_API_TOKEN']}":
            return h.reply(
                401,
                {
                    "title": "Unauthenticated",
                    "detail": "You did not pass a valid authentication token",
                    "status": 401,
                },
            )
        prompt = body.get("input", {}).get("prompt", "")
        self.record("replicate", prompt, False)
        bad = self.record_data_uris(prompt, body.get("input", {}))
        if bad:
            return h.reply(422, {"title": "Input validation failed", "detail": bad, "status": 422})
        if "throttle" in prompt and self.first_time(prompt):
            return h.reply(
                429,
                {"detail": "Request was throttled. Your rate limit resets in ~0s.", "status": 429},
            )
        if "broke" in prompt:
            return h.reply(
                422,
                {
                    "title": "Input validation failed",
                    "detail": "- prompt: bad",
                    "status": 422,
                    "invalid_fields": [{"field": "prompt"}],
                },
            )
        if h.path.split("?")[0] == "/v1/predictions" and not body.get("version"):
            return h.reply(
                422,
                {
                    "title": "Input validation failed",
                    "detail": "- version: required",
                    "status": 422,
                },
            )
        if "submit-drop" in prompt and self.first_time(f"submit-drop {prompt}"):
            # created (it runs, and is billed), then the connection drops before the answer
            # (its prediction id) reaches afc
            self.record("replicate", prompt, True)
            h.close_connection = True
            h.connection.shutdown(socket.SHUT_RDWR)
            return
        pid = uuid.uuid4().hex[:20]
        self.record("replicate", prompt, True)  # a created prediction runs and is billed
        self.predictions[pid] = {
            "id": pid,
            "status": "starting",
            "input": body.get("input"),
            "output": None,
            "error": None,
            "logs": "",
            "metrics": {},
            "data_removed": False,
            "polls": 0,
            "prompt": prompt,
            "model": "/".join(h.path.split("?")[0].split("/")[3:5]),
            "version": body.get("version"),  # a model version's prediction (POST /predictions)
            "cancel_after": h.headers.get("Cancel-After"),
            "urls": {
                "get": f"{self.base}/v1/predictions/{pid}",
                "cancel": f"{self.base}/v1/predictions/{pid}/cancel",
            },
        }
        h.reply(
            201, {k: v for k, v in self.predictions[pid].items() if k not in ("polls", "prompt")}
        )

    def replicate_cancel(self, h, pid: str) -> None:
        """Replicate answers a cancel with the prediction: one still starting or processing
        ends ``canceled``; a finished one cannot be cancelled and comes back as it is. A
        "done-at-cancel" prediction completes (rendered and billed) just before the cancel
        reaches it: it comes back ``succeeded``, its output there to fetch."""
        self.cancels.append(pid)
        p = self.predictions.get(pid)
        if p is None:
            return h.reply(404, {"title": "Not found", "detail": "Not found.", "status": 404})
        if "cancel-refused-429" in p["prompt"] and self.first_time(f"cancel-refused-429 {pid}"):
            # Replicate's throttled answer to the prediction's first cancel (a batch's cancels
            # asked at once met the account's rate limit): nothing done, ask again later
            return h.reply(
                429,
                {"detail": "Request was throttled. Expected available in 1 second.", "status": 429},
                headers={"Retry-After": "0"},
            )
        if p["status"] in ("starting", "processing"):
            if "aborted-at-cancel" in p["prompt"]:  # its deadline passed before it started
                p.update(status="aborted")
            elif "done-at-cancel" in p["prompt"]:
                p.update(
                    status="succeeded",
                    output=[f"{self.base}/files/{pid}.png"],
                    metrics={"predict_time": 3.2, "total_time": 3.5},
                )
                if "odd-metrics" in p["prompt"]:
                    # a metric no number: megabytes of text quoting the request's key
                    said = f"Bearer {KEYS['REPLICATE_API_TOKEN']} " * 40_000
                    p["metrics"] = {"predict_time": said}
            elif "removed-at-cancel" in p["prompt"] and self.first_time(
                f"removed-at-cancel {p['prompt']}"
            ):  # it succeeded (billed) before the cancel, and its data is removed already
                p.update(status="succeeded", data_removed=True, metrics={"predict_time": 3.2})
            elif "flagged-at-cancel" in p["prompt"]:  # it failed, refused, before the cancel
                p.update(
                    status="failed",
                    error="The input or output was flagged as sensitive. "
                    "Please try again with different inputs. (E005)",
                    metrics={"predict_time": 1.5},
                )
            else:
                p["status"] = "canceled"
        h.reply(200, {k: v for k, v in p.items() if k not in ("polls", "prompt")})

    def replicate_get(self, h, pid: str) -> None:
        self.count("replicate_poll")
        p = self.predictions.get(pid)
        if p is None:
            return h.reply(404, {"title": "Not found", "detail": "Not found.", "status": 404})
        p["polls"] += 1
        if "poll-outage" in p["prompt"] and p["polls"] <= OUTAGE_POLLS:
            return h.reply(
                503,
                {"title": "Service Unavailable", "detail": "Service Unavailable", "status": 503},
            )
        if "poll-429" in p["prompt"] and p["polls"] == 1:
            # Replicate's throttled answer (its documented wording); with "retry-after" in the
            # prompt, a Retry-After header too
            said = {"Retry-After": "9"} if "retry-after" in p["prompt"] else None
            return h.reply(
                429,
                {
                    "detail": "Request was throttled. Expected available in 7 seconds.",
                    "status": 429,
                },
                headers=said,
            )
        if "garbled-forever" in p["prompt"]:  # a status that never makes sense
            return h.reply(200, raw=b"<html>not a prediction</html>", ctype="text/html")
        if "garbled-poll" in p["prompt"] and p["polls"] in (2, 3):  # a proxy's page, twice
            return h.reply(200, raw=b"<html><body>upstream hiccup</body></html>", ctype="text/html")
        if "poll-401" in p["prompt"] and p["polls"] >= 2 and not self.key_restored.is_set():
            # the key revoked mid-render (the prediction renders on, billed)
            return h.reply(
                401, {"title": "Unauthenticated", "detail": "Invalid token", "status": 401}
            )
        if "flaky-download" in p["prompt"]:
            self.flaky_files.add(f"/files/{pid}.png")
        if "cut-download" in p["prompt"]:
            self.cut_files.add(f"/files/{pid}.png")
        self.cdn_outage(p["prompt"], f"/files/{pid}.png")
        if big := re.search(r"big-out-(\d+)", p["prompt"]):
            self.big_files[f"/files/{pid}.png"] = int(big.group(1)) << 20
        if p["status"] in ("starting", "processing"):
            held = "hold" in p["prompt"] and not self.released.is_set()
            # a "done-at-cancel" prediction renders until a cancel finds it completed
            held = held or any(
                f"{end}-at-cancel" in p["prompt"] for end in ("done", "flagged", "aborted")
            )
            # a "removed-at-cancel" prompt's first prediction only (its next one renders)
            held = held or (
                "removed-at-cancel" in p["prompt"]
                and f"removed-at-cancel {p['prompt']}" not in self.seen_once
            )
            if held or p["polls"] < 3:
                p["status"] = "processing"
            elif "data-removed" in p["prompt"] and (
                # "data-removed-once": the prompt's first prediction only (its next renders)
                "data-removed-once" not in p["prompt"]
                or self.first_time(f"data-removed-once {p['prompt']}")
            ):  # it ran (and was billed); output deleted
                p.update(status="succeeded", data_removed=True, metrics={"predict_time": 3.2})
            elif "flagged" in p["prompt"]:
                p.update(
                    status="failed",
                    error="The input or output was flagged as sensitive. "
                    "Please try again with different inputs. (E005)",
                    metrics={"predict_time": 1.5},
                )
            elif "replicate-timeout" in p["prompt"]:
                # Replicate's own limit: a prediction that runs 30 minutes fails so, billed
                # for the whole run (the wording its API and web page give)
                p.update(
                    status="failed",
                    error="Prediction timed out",
                    metrics={"predict_time": 1800.0, "total_time": 1800.4},
                )
            elif "checker-fails" in p["prompt"]:
                # a model's own safety checker (Replicate's flux and SDXL models, on unless
                # ``disable_safety_checker``) filtered every image out: the model fails so
                p.update(
                    status="failed",
                    error="All generated images contained NSFW content. Try running it again "
                    "with a different prompt.",
                    metrics={"predict_time": 2.5},
                )
            else:
                # ``num_outputs`` outputs (a model input several image models take)
                count = p["input"].get("num_outputs") if isinstance(p["input"], dict) else None
                count = count if isinstance(count, int) else 1
                ext = "webp" if "webp-out" in p["prompt"] else "png"
                ext = "mp4" if "mp4-out" in p["prompt"] else ext  # a video model's
                ext = self.answered_format(p["model"], p["input"]) or ext
                output: list[str] | dict = (
                    [f"{self.base}/files/{pid}-{i}.{ext}" for i in range(count)]
                    if count > 1
                    else [f"{self.base}/files/{pid}.{ext}"]
                )
                if "object-out" in p["prompt"]:  # a model whose output schema is an object
                    output = {"seed": 42, "image": output[0], "nsfw": False}
                p.update(
                    status="succeeded",
                    output=output,
                    metrics={"predict_time": 3.2, "total_time": 3.5},
                )
        h.reply(200, {k: v for k, v in p.items() if k not in ("polls", "prompt")})

    # --- fal ----------------------------------------------------------------------------------

    def fal_submit(self, h, model: str) -> None:
        self.count("fal_submit")
        body = h.body()
        if h.headers.get("Authorization") != f"Key {KEYS['FAL_KEY']}":
            return h.reply(401, {"detail": "Unauthorized"})
        prompt = body.get("prompt", "")
        self.record("fal", prompt, False)
        # every field: a model names its own reference field (image_url, image_urls, ...)
        bad = self.record_data_uris(prompt, body)
        if bad:
            return h.reply(422, {"detail": [{"loc": ["body"], "msg": bad, "type": "value_error"}]})
        if "retryable-422" in prompt and self.first_time(f"retryable {prompt}"):
            return h.reply(
                422,
                {"detail": [{"loc": ["body", "image_url"], "msg": "timed out", "type": "x"}]},
                headers={"X-Fal-Retryable": "true"},
            )
        if "gateway-502" in prompt and self.first_time(f"gateway {prompt}"):
            return h.reply(502, raw=b"<html>502 Bad Gateway</html>", ctype="text/html")
        if "runner-503" in prompt and self.first_time(f"runner {prompt}"):
            return h.reply(
                503,
                {"detail": "Runner scheduling failure", "error_type": "runner_scheduling_failure"},
                headers={"X-Fal-Error-Type": "runner_scheduling_failure"},
            )
        if "nsfw" in prompt:
            return h.reply(
                422,
                {
                    "detail": [
                        {
                            "loc": ["body", "prompt"],
                            "msg": "content policy violation",
                            "type": "content_policy_violation",
                        }
                    ]
                },
                headers={"X-Fal-Retryable": "false"},
            )
        if "submit-drop" in prompt and self.first_time(f"submit-drop {prompt}"):
            # queued (it runs and is billed), then the connection drops before the answer
            # (its request id) reaches afc
            self.record("fal", prompt, True)
            h.close_connection = True
            h.connection.shutdown(socket.SHUT_RDWR)
            return
        rid = str(uuid.uuid4())
        self.record("fal", prompt, True)  # a queued request runs and is billed
        count = body.get("num_images")  # several images of one request, each billed
        count = count if isinstance(count, int) else 1
        if "extra-image" in prompt:  # a model that makes (and bills) one more than asked
            count += 1
        self.fal[rid] = {
            "prompt": prompt,
            "polls": 0,
            "status": "IN_QUEUE",
            "images": count,
            "sync_mode": body.get("sync_mode") is True,  # images inline, as data URLs
            "input": body,  # as submitted (the model's input fields)
            "format": self.answered_format(model, body) or "png",
            # a "result-ended" prompt's first request ends in fal's own 504 (its result)
            "ended_5xx": "result-ended" in prompt and self.first_time(f"result-ended {prompt}"),
        }
        root = f"{self.base}/fal-ai/flux/requests/{rid}"
        h.reply(
            200,
            {
                "request_id": rid,
                "response_url": root,
                "status_url": f"{root}/status",
                "cancel_url": f"{root}/cancel",
                "queue_position": 0,
            },
        )

    def fal_request(self, h, method: str, rid: str, tail: str) -> None:
        r = self.fal.get(rid)
        if r is None:
            return h.reply(404, {"detail": "Request not found"})
        if tail == "/cancel":
            self.cancels.append(rid)
            if "slow-cancel" in r["prompt"]:
                with self.lock:
                    self.cancels_now += 1
                    self.cancels_at_once = max(self.cancels_at_once, self.cancels_now)
                time.sleep(0.3)
                with self.lock:
                    self.cancels_now -= 1
            if "cancel-unanswered" in r["prompt"]:
                # the cancel never reaches the request (fal's API hangs on it): the request
                # renders on and completes, billed, while the cancel waits for an answer
                r["done"] = True
                time.sleep(CANCEL_UNANSWERED_S)
                return h.reply(504, raw=b"<html>504 Gateway Time-out</html>", ctype="text/html")
            if "cancel-refused" in r["prompt"]:
                # fal's API fails the cancel (a 500): nothing stopped, the request renders on
                # and completes, billed, its result kept to fetch (fal has no window of its own);
                # a "held-on" one renders on past any window
                r["done"] = "held-on" not in r["prompt"]
                return h.reply(500, {"detail": "Internal Server Error"})
            if "done-at-cancel" in r["prompt"]:
                # it completed (and was billed) between afc's last poll and its cancel: fal
                # answers so, and its result is there to fetch
                r["done"] = True
                # fal's documented cancel answer names ALREADY_COMPLETED among its statuses
                # without an error status ("cancel-says-200"); a gateway may answer 409
                said = 200 if "cancel-says-200" in r["prompt"] else 400
                said = 409 if "cancel-says-409" in r["prompt"] else said
                return h.reply(said, {"status": "ALREADY_COMPLETED"})
            r["status"] = "CANCELLED"
            return h.reply(202, {"status": "CANCELLATION_REQUESTED"})
        if tail == "/status":
            self.count("fal_poll")
            r["polls"] += 1
            if "poll-outage" in r["prompt"] and r["polls"] <= OUTAGE_POLLS:
                return h.reply(503, {"detail": "Service Unavailable"})
            if "garbled-forever" in r["prompt"]:
                return h.reply(200, raw=b"<html>not a status</html>", ctype="text/html")
            if "garbled-202-forever" in r["prompt"]:  # a proxy's "accepted" page, every time
                return h.reply(202, raw=b"<html>accepted</html>", ctype="text/html")
            if "accepted-json-forever" in r["prompt"]:  # a gateway's JSON "accepted", no status
                return h.reply(202, {"message": "Accepted"})
            if "garbled-poll" in r["prompt"] and r["polls"] in (2, 3):
                return h.reply(200, raw=b"<html>upstream hiccup</html>", ctype="text/html")
            if "poll-401" in r["prompt"] and r["polls"] >= 2 and not self.key_restored.is_set():
                return h.reply(401, {"detail": "Unauthorized"})
            if "poll-409" in r["prompt"] and r["polls"] <= 2:  # a conflict: ask again
                return h.reply(409, {"detail": "Conflict"})
            if "flaky-download" in r["prompt"]:
                self.flaky_files.add(f"/files/{rid}.png")
            self.cdn_outage(r["prompt"], f"/files/{rid}.png")
            held = "hold" in r["prompt"] and not self.released.is_set()
            # a "done-at-cancel" request renders until a cancel finds it completed
            held = held or ("done-at-cancel" in r["prompt"] and not r.get("done"))
            # a "cancel-refused" request renders until the cancel fal failed to take
            held = held or (
                ("cancel-refused" in r["prompt"] or "cancel-unanswered" in r["prompt"])
                and not r.get("done")
            )
            if held or (r["polls"] < 3 and not r.get("done")):
                r["status"] = "IN_PROGRESS"
                return h.reply(202, {"status": "IN_PROGRESS", "logs": None})
            r["status"] = "COMPLETED"
            if "completed-202" in r["prompt"]:  # a gateway's 202 for every status answer
                return h.reply(202, {"status": "COMPLETED", "logs": None})
            if "flagged-at-end" in r["prompt"]:
                # the model's safety check refused the request as it ran: fal ends it with
                # the error's type (second-hand: README "Providers")
                return h.reply(
                    200,
                    {
                        "status": "COMPLETED",
                        "logs": None,
                        "error": "The content was flagged by the safety checker",
                        "error_type": "content_policy_violation",
                    },
                )
            if "runner-died" in r["prompt"] and self.first_time(f"runner-died {r['prompt']}"):
                # fal's own retries of a runner lost mid-request ran out: the request ended
                # in a 503, which fal does not bill
                return h.reply(
                    200,
                    {
                        "status": "COMPLETED",
                        "logs": None,
                        "error": "Runner disconnected",
                        "error_type": "runner_disconnected",
                    },
                )
            return h.reply(
                200, {"status": "COMPLETED", "logs": None, "metrics": {"inference_time": 1.1}}
            )
        self.count("fal_result")
        if "result-unfinished" in r["prompt"] and r["status"] != "COMPLETED" and not r.get("done"):
            # fal has no result for a request not completed: it answers 400 (a request still
            # queued or running, or one cancelled before it ran)
            return h.reply(400, {"detail": "Request is still in progress"})
        with self.lock:
            r["result_gets"] = r.get("result_gets", 0) + 1
        if "result-outage" in r["prompt"]:
            # the queue's ingress out of reach for a moment: its gateway's page, none of fal's
            # words (no error_type, no X-Fal-Error-Type, no x-fal-request-id: what fal's own
            # client tells apart as an ingress error, and tries again)
            if r["result_gets"] <= CDN_OUTAGE:
                return h.reply(
                    504, raw=b"<html>504 Gateway Time-out (nginx)</html>", ctype="text/html"
                )
        if r.get("ended_5xx"):
            # the request itself ended in one of fal's own 5xx (its runner timed out, after
            # fal's own retries): its status said COMPLETED, and its result is that error,
            # every time it is asked, in fal's request-error shape (not billed)
            return h.reply(
                504,
                {"detail": "Request timed out", "error_type": "request_timeout"},
                headers={"X-Fal-Error-Type": "request_timeout", "x-fal-request-id": rid},
            )
        if "result-page" in r["prompt"]:
            # a captive portal's or a proxy's page answered 200 in place of the result, for
            # the first CDN_OUTAGE GETs: the result is still at fal
            if r["result_gets"] <= CDN_OUTAGE:
                return h.reply(200, raw=b"<html>Sign in to the network</html>", ctype="text/html")
        if "result-gone" in r["prompt"]:  # completed and billed; its result already deleted
            return h.reply(404, {"detail": "Request not found"})
        if "result-422" in r["prompt"]:
            # the queued request failed its model's validation: fal marks it retryable
            return h.reply(
                422,
                {"detail": [{"loc": ["body", "image_url"], "msg": "bad input", "type": "x"}]},
                headers={"X-Fal-Retryable": "true"},
            )
        h.reply(
            200,
            {
                "images": [
                    {
                        "url": "data:image/png;base64,"
                        + (
                            bad_image_b64(r["prompt"])
                            if "b64-text" in r["prompt"] or "b64-cut" in r["prompt"]
                            else base64.b64encode(render_png(f"/files/{rid}.png", 32, 32)).decode()
                        )
                        if r.get("sync_mode")
                        # a first image whose URL the result leaves out ("first-no-url")
                        else None
                        if not i and "first-no-url" in r["prompt"]
                        # a flagged first image's followers at URLs of their own
                        else f"{self.base}/files/{rid}-{i}.{r['format']}"
                        if i and ("checker-first" in r["prompt"] or "first-no-url" in r["prompt"])
                        else f"{self.base}/files/{rid}.{r['format']}",
                        # the size the input asks for, as fal reports each image's (the
                        # bytes are a small PNG all the same)
                        **fal_size(r["input"]),
                        "content_type": f"image/{r['format']}",
                    }
                    for i in range(r["images"])
                ],
                "timings": {"inference": 1.1},
                "seed": 1,
                # fal's safety checker (``enable_safety_checker``, on by default) answers a
                # flagged image as a black one, saying so here; ``checker-flags`` flags all,
                # ``checker-first`` the first of several
                "has_nsfw_concepts": [
                    "checker-flags" in r["prompt"] or ("checker-first" in r["prompt"] and i == 0)
                    for i in range(r["images"])
                ],
            },
        )

    # --- Gemini -------------------------------------------------------------------------------

    def gemini(self, h, model: str) -> None:
        self.count("gemini")
        body = h.body()
        if h.headers.get("x-goog-api-key") != KEYS["GEMINI_API_KEY"]:
            return h.reply(
                400,
                {
                    "error": {
                        "code": 400,
                        "message": "API key not valid.",
                        "status": "INVALID_ARGUMENT",
                        "details": [
                            {
                                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                                "reason": "API_KEY_INVALID",
                            }
                        ],
                    }
                },
            )
        prompt = body["contents"][0]["parts"][0]["text"]
        self.record("gemini", prompt, False)
        self.gemini_configs[prompt] = body.get("generationConfig")
        for part in body["contents"][0]["parts"][1:]:
            inline = part.get("inline_data") or part.get("inlineData") or {}
            mime = inline.get("mime_type") or inline.get("mimeType")
            if mime not in IMAGE_TYPES or not inline.get("data"):
                return h.reply(400, {"error": {"code": 400, "status": "INVALID_ARGUMENT"}})
            digest = hashlib.sha256(base64.b64decode(inline["data"], validate=True)).hexdigest()
            self.inputs.setdefault(prompt, []).append(("inline_data", mime, digest))
        usage = {"promptTokenCount": 10, "candidatesTokenCount": 1290, "totalTokenCount": 1300}
        if "thinking" in prompt:
            # a thinking model (gemini-3-pro-image): its thoughts are counted apart from the
            # candidates (``thoughtsTokenCount``, not in candidatesTokenCount) and billed as output
            usage = {**usage, "thoughtsTokenCount": 200, "totalTokenCount": 1500}
        if "no-output-count" in prompt:
            # an answer whose usage leaves the output's count out (the prompt's alone)
            usage = {"promptTokenCount": 10, "totalTokenCount": 1300}
            if "thinking" in prompt:  # a thinking model's answer: its thoughts still counted
                usage = {**usage, "thoughtsTokenCount": 200, "totalTokenCount": 1500}
        if "quota" in prompt and self.first_time(prompt):
            return h.reply(
                429,
                {
                    "error": {
                        "code": 429,
                        "message": "Resource has been exhausted",
                        "status": "RESOURCE_EXHAUSTED",
                        "details": [
                            {
                                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                                "violations": [],
                            },
                            {
                                "@type": "type.googleapis.com/google.rpc.RetryInfo",
                                "retryDelay": "0.2s",
                            },
                        ],
                    }
                },
            )
        if "overloaded" in prompt and self.first_time(f"overloaded {prompt}"):
            # Google's own 503 (not a gateway's): a request that fails with a 500 error is
            # not charged (the Gemini API's billing FAQ)
            return h.reply(
                503,
                {
                    "error": {
                        "code": 503,
                        "message": "The model is overloaded. Please try again later.",
                        "status": "UNAVAILABLE",
                    }
                },
            )
        if "gateway-502" in prompt and self.first_time(f"gateway {prompt}"):
            return h.reply(502, raw=b"<html>502 Bad Gateway</html>", ctype="text/html")
        if "blocked" in prompt:
            return h.reply(
                200,
                {
                    "promptFeedback": {"blockReason": "SAFETY"},
                    "candidates": [],
                    "usageMetadata": {"promptTokenCount": 10, "totalTokenCount": 10},
                    "responseId": "resp-blocked-01",
                },
            )
        if "image-safety" in prompt or "image-recitation" in prompt:
            return h.reply(
                200,
                {
                    "candidates": [
                        {
                            "finishReason": "IMAGE_SAFETY"
                            if "image-safety" in prompt
                            else "IMAGE_RECITATION",
                            "content": {"parts": [{"text": "I can't make that."}], "role": "model"},
                        }
                    ],
                    "usageMetadata": usage,
                },
            )
        data = base64.b64encode(render_png(prompt, 32, 32)).decode()
        if "garbled" in prompt:  # a paid answer whose image is not base64
            data = "QUJ"
        if "b64-text" in prompt or "b64-cut" in prompt:  # base64 of no image, or of a cut one
            data = bad_image_b64(prompt)
        self.record("gemini", prompt, True)
        h.reply(
            200,
            {
                "candidates": [
                    {
                        "content": {
                            "parts": [{"inlineData": {"mimeType": "image/png", "data": data}}],
                            "role": "model",
                        },
                        "finishReason": "STOP",
                    }
                ],
                "usageMetadata": usage,
                "responseId": f"resp-{uuid.uuid4().hex[:8]}",
                "modelVersion": model,
            },
        )


IMAGE_TYPES = ("image/png", "image/jpeg", "image/webp")


# fal's image_size presets (flux/dev's), in pixels
FAL_SIZES = {
    "square_hd": (1024, 1024),
    "square": (512, 512),
    "portrait_4_3": (768, 1024),
    "portrait_16_9": (576, 1024),
    "landscape_4_3": (1024, 768),
    "landscape_16_9": (1024, 576),
}


def fal_size(model_input: dict) -> dict:
    """The ``width`` and ``height`` fal's result gives each image: its input's ``image_size``
    (a preset's name, or ``{width, height}``), else 32 x 32 (the test image's own size)."""
    size = model_input.get("image_size")
    if isinstance(size, dict):
        return {"width": size.get("width"), "height": size.get("height")}
    width, height = FAL_SIZES.get(size, (32, 32)) if isinstance(size, str) else (32, 32)
    return {"width": width, "height": height}


def bad_image_b64(prompt: str) -> str:
    """A paid answer's base64 that is no whole image: a "b64-text" prompt's, a line of plain
    text (a gateway's error words, say); a "b64-cut" prompt's, the image's first 40 bytes."""
    if "b64-text" in prompt:
        return base64.b64encode(b"upstream error: the image could not be returned\n").decode()
    return base64.b64encode(render_png(prompt, 32, 32)[:40]).decode()


def cut_reply(h, data: bytes) -> None:
    """Answer ``data`` with a ``Content-Length`` of 20 bytes, and send the rest of it a moment
    after those (a CDN or proxy whose length is wrong): HTTP ends the answer at 20 bytes."""
    h.send_response(200)
    h.send_header("Content-Type", "image/png")
    h.send_header("Content-Length", "20")
    h.send_header("Connection", "close")  # no next request on it: its rest is what follows
    h.end_headers()
    h.wfile.write(data[:20])
    h.wfile.flush()
    time.sleep(0.2)
    h.wfile.write(data[20:])
    h.close_connection = True


def big_output(size: int) -> bytes:
    """What a "big-out" output decodes to: a PNG signature, then zeros."""
    return PNG_SIGNATURE + bytes(size - len(PNG_SIGNATURE))


def big_output_gzip(size: int) -> bytes:
    import zlib

    packer = zlib.compressobj(1, zlib.DEFLATED, 31)  # 31: a gzip header and trailer
    parts = [packer.compress(PNG_SIGNATURE)]
    zeros = bytes(1 << 20)
    left = size - len(PNG_SIGNATURE)
    while left:
        piece = min(left, len(zeros))
        parts.append(packer.compress(zeros[:piece]))
        left -= piece
    parts.append(packer.flush())
    body = b"".join(parts)
    return body


def render_webp() -> bytes:
    """A small WebP image (Pillow, afc's web extra)."""
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 120, 40)).save(out, "WEBP")
    return out.getvalue()


def render_jpeg() -> bytes:
    """A small JPEG image (Pillow, afc's web extra)."""
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (8, 8), (40, 120, 200)).save(out, "JPEG")
    return out.getvalue()


def render_mp4() -> bytes:
    """A minimal MP4 file's boxes: ``ftyp`` (brand isom), then an ``mdat`` of a few bytes."""
    ftyp = b"ftyp" + b"isom" + (512).to_bytes(4, "big") + b"isomiso2mp41"
    mdat = b"mdat" + bytes(range(32))
    return b"".join((len(box) + 4).to_bytes(4, "big") + box for box in (ftyp, mdat))


def _openai_invalid(message: str, param: str | None) -> dict:
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": param,
            "code": None,
        }
    }
