"""Outside audit 55c (secrets, searched for with generated inputs): an AWS session token (or
secret) quoted back percent-encoded, as in a URL or a form body, left pieces of itself on
stderr, in the ledger and in --json. Its ``/``, ``+`` and ``=`` are written ``%2F``, ``%2B``,
``%3D``, so the text held the token only as its runs between them; the scrubber took out each
run of twelve characters or more first (``PARTIAL_CHARS``), and the text decoded then no
longer held the token whole: the runs shorter than twelve stayed ('abcdefghij%2F<redacted>',
the first ten characters of the secret). The same befell a key broken over lines by escaped
breaks when an escape's letter and the next line read as a piece of the key. Pieces are now
looked for once, in the text as finally decoded, so the whole value is found first."""

from __future__ import annotations

import json
import string
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler

from conftest import manifest
from fakeproviders import BackloggedServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from afc_cli import secrets

B64 = string.ascii_letters + string.digits + "+/"


def _b64(size: int) -> st.SearchStrategy[str]:
    return st.text(alphabet=B64, min_size=size, max_size=size)


SHAPES = {
    # a session token: base64, its '+' and '/' anywhere, padded
    "AWS_SESSION_TOKEN": st.integers(min_value=100, max_value=400)
    .flatmap(_b64)
    .map(lambda t: t + "=="),
    "AWS_SECRET_ACCESS_KEY": _b64(40),
}

ECHOES = {
    "percent-encoded": lambda v: urllib.parse.quote(v, safe=""),
    "in a query": lambda v: "https://proxy.example/echo?cred=" + urllib.parse.quote(v, safe=""),
    "form-encoded": lambda v: urllib.parse.urlencode({"x-amz-token-was": v}),
    "in a JSON error": lambda v: json.dumps({"error": {"quoted": urllib.parse.quote(v)}}),
    "in escaped lines": lambda v: "\\r\\n".join(v[i : i + 10] for i in range(0, len(v), 10)),
}


def _left(out: str, value: str, run: int = 8) -> list[str]:
    """Pieces of ``value`` of ``run`` characters in ``out`` as it is or percent-decoded."""
    texts = (out.lower(), urllib.parse.unquote(out).lower())
    value = value.lower()
    return [
        value[i : i + run]
        for i in range(len(value) - run + 1)
        if any(value[i : i + run] in text for text in texts)
    ]


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.sampled_from(sorted(SHAPES)).flatmap(lambda n: st.tuples(st.just(n), SHAPES[n])),
    st.sampled_from(sorted(ECHOES)),
)
def test_a_value_quoted_back_encoded_leaves_no_piece_of_it(named, echo):
    name, value = named
    saved = {n: secrets.os.environ.pop(n, None) for n in SHAPES}
    try:
        secrets.os.environ[name] = value
        secrets.reset()
        out = secrets.scrub(f"403 from the store: {ECHOES[echo](value)} (request refused)")
    finally:
        for n, old in saved.items():
            secrets.os.environ.pop(n, None)
            if old is not None:
                secrets.os.environ[n] = old
        secrets.reset()
    assert out.startswith("403 from the store: ") and out.endswith(" (request refused)")
    assert "<redacted>" in out
    assert _left(out, value) == [], out


def test_a_key_cut_short_and_encoded_is_still_removed(monkeypatch):
    """What the twelve-character rule is for still holds once pieces are looked for last: a
    cut echo, encoded or not."""
    secret = "abcdefghij/klmnopqrstuvwxyz0123456789ABC"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    secrets.reset()
    try:
        for echo in (secret[:24], urllib.parse.quote(secret[:24], safe=""), secret[5:30]):
            out = secrets.scrub(f"said: {echo}.")
            assert _left(out, secret, 12) == [], out
    finally:
        secrets.reset()


# a session token (no padding) ending in a run of nine after its last '/': written
# percent-encoded, that run was left (a run between two others joins them, once decoded, and
# is found as a piece)
TOKEN = "IQoJb3JpZ2luX2Vj/abcdEFGH12+XyZ0987654321QWERTYuiop/LKJHGFDSAzxcvBNM/Zxcv12345"


class _QuotingStore(BaseHTTPRequestHandler):
    """The bucket is there (its HEAD 200), no object is (404), and every write is refused
    403, the session token it was sent quoted back percent-encoded (a proxy in front of the
    store that logs the request's headers as a form would)."""

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        if self.command == "HEAD":
            status = 200 if self.path.rstrip("/").count("/") <= 1 else 404
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        sent = urllib.parse.quote(self.headers.get("x-amz-security-token") or "", safe="")
        body = (
            "<?xml version='1.0'?><Error><Code>AccessDenied</Code>"
            f"<Message>denied: the session token {sent} has expired</Message></Error>"
        ).encode()
        self.send_response(403)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _answer

    def log_message(self, *args) -> None:
        pass


def test_a_store_quoting_the_session_token_percent_encoded_leaks_no_piece_of_it(afc):
    server = BackloggedServer(("127.0.0.1", 0), _QuotingStore)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {
        "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE55C",
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYzEXAMPLEKEY",
        "AWS_SESSION_TOKEN": TOKEN,
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{server.server_address[1]}",
    }
    try:
        afc.write_manifest(manifest([{"key": "shot", "prompt": "a lighthouse"}]))
        said = [afc("submit", "manifest.yaml", "--storage", "s3://renders/films", env=env)]
        said += [afc("show", "shot", "--json", env=env), afc("status", "--json", env=env)]
    finally:
        server.shutdown()
        server.server_close()
    assert "denied: the session token " in said[0].stderr, said[0].stderr
    files = b"".join(p.read_bytes() for p in afc.cwd.glob("afc.db*") if p.is_file())
    everything = "\n".join([files.decode("latin-1")] + [r.stdout + r.stderr for r in said])
    assert "<redacted>" in everything
    assert _left(everything, TOKEN) == [], said[0].stderr
