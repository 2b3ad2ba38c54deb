"""Outside audit 46 (c): a provider key's header dump, base64 wrapped at 76 columns (MIME's),
inside a JSON text held as a string (a gateway's message quoting the upstream's JSON answer):
its line breaks are JSON escapes there (a backslash and an ``n``), which no decoder joined, so
the key's base64 was kept and shown whole, split at a line no encoded form crosses. The unit
case calls ``secrets.scrub``; the end-to-end one runs the real ``afc`` against a raw socket
server (tests/test_audit_wire.py) and reads every way out."""

from __future__ import annotations

import base64
import json
import re
import sqlite3
import textwrap

import pytest
from conftest import manifest
from fakeproviders import KEYS
from test_audit_wire import WireServer, reply

from afc_cli import secrets

# a key of a real key's length: its header's base64 wraps at 76 columns
OPENAI = "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAB7CD0EF3GH6IJ9KL2MN5OP8QR"


def _wrapped_b64(text: str, width: int = 76) -> str:
    return "\n".join(textwrap.wrap(base64.b64encode(text.encode()).decode(), width))


def _key_in(out: str, key: str) -> bool:
    """Whether ``key`` can be read back from ``out``: as it is, or from any run of base64
    in it once its line breaks (real or JSON-escaped) are joined."""
    flat = out.replace("\\r", "").replace("\\n", "").replace("\r", "").replace("\n", "")
    if key.lower() in flat.lower():
        return True
    for run in re.findall(r"[A-Za-z0-9+/]{16,}={0,2}", flat):
        for start in range(4):
            piece = run[start:]
            piece = piece[: len(piece) // 4 * 4]
            try:
                if key.encode() in base64.b64decode(piece):
                    return True
            except ValueError:
                continue
    return False


@pytest.fixture
def keyed(monkeypatch):
    secrets.reset()
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI)
    yield
    secrets.reset()


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_a_wrapped_base64_key_inside_an_escaped_json_text_is_scrubbed(keyed, newline):
    dump = _wrapped_b64(f"Authorization: Bearer {OPENAI}").replace("\n", newline)
    echo = json.dumps({"debug": dump})  # its line breaks now a backslash and a letter
    assert _key_in(echo, OPENAI)
    out = secrets.scrub(f"upstream answered {echo}. Request refused.")
    assert "<redacted>" in out, out
    assert "upstream answered " in out and "Request refused." in out
    assert not _key_in(out, OPENAI), out


def test_text_with_escaped_line_breaks_but_no_secret_keeps_its_characters(keyed):
    for text in ('{"detail": "line one\\nline two"}', "C:\\new\\notes.txt"):
        assert secrets.scrub(text) == text


def test_a_gateway_quoting_the_wrapped_header_leaks_the_key_nowhere(afc):
    """A 401 from a gateway in front of OpenAI whose message is the upstream's JSON answer
    holding the request's header dump, base64 wrapped at 76 columns: the key is in neither
    the ledger, stderr, 'afc show' nor --json, and the call was sent once."""
    dump = _wrapped_b64(f"Authorization: Bearer {OPENAI}")
    message = "upstream answered " + json.dumps({"detail": "invalid key", "request": dump})
    answer = reply(
        "401 Unauthorized",
        json.dumps({"error": {"message": message, "code": "invalid_api_key"}}).encode(),
        {"Content-Type": "application/json"},
    )

    async def behaviour(head, body, writer) -> bool:
        writer.write(answer)
        await writer.drain()
        return True

    server = WireServer(behaviour)
    try:
        data = manifest([{"key": "shot", "prompt": "a lighthouse"}])
        data["defaults"]["chain"] = [
            {"provider": "openai", "model": "gpt-image-1", "attempts": 1, "backoff": {"base": 0.01}}
        ]
        data["rates"] = [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}]
        afc.write_manifest(data)
        env = {**KEYS, "OPENAI_API_KEY": OPENAI, "OPENAI_BASE_URL": server.url}
        said = [afc("submit", "manifest.yaml", env=env)]
        said += [afc("submit", "manifest.yaml", "--json", env=env)]
        said += [afc(*args, env=env) for args in (("show", "shot"), ("show", "shot", "--json"))]
        said += [afc("status", "--json", env=env)]
        assert len(server.received) == 1  # an auth failure is not sent again
        conn = sqlite3.connect(afc.cwd / "afc.db")
        dump_sql = "\n".join(conn.iterdump())
        conn.close()
        assert "upstream answered" in dump_sql
        everything = "\n".join([dump_sql] + [r.stdout + r.stderr for r in said])
        assert "<redacted>" in everything
        assert not _key_in(everything, OPENAI)
    finally:
        server.stop()
