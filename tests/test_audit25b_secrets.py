"""Outside audit 25 (b): a provider key quoted back in forms the scrubber did not undo: JSON
escapes left in a text (a gateway's message that holds the upstream's JSON answer as a string,
or an encoder that escapes every character), and a key or its base64 broken over lines (a
header dump wrapped at 76 columns, a key printed in short lines). The unit cases call
``secrets.scrub``; the end-to-end one runs the real ``afc`` against a raw socket server
(tests/test_audit_wire.py) and reads every way out."""

from __future__ import annotations

import base64
import json
import sqlite3
import textwrap

import pytest
from conftest import manifest
from fakeproviders import KEYS
from test_audit_wire import WireServer, reply

from afc_cli import secrets

OPENAI = "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAB7CD0EF3GH6IJ9KL2MN5OP8QR"


@pytest.fixture
def keyed(monkeypatch):
    secrets.reset()
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI)
    yield
    secrets.reset()


def _pieces_left(out: str, key: str, run: int = 6) -> list[str]:
    """Pieces of ``key`` of ``run`` characters still in ``out`` (any case)."""
    low, key = out.lower(), key.lower()
    return [key[i : i + run] for i in range(len(key) - run + 1) if key[i : i + run] in low]


def _encoded_left(out: str, key: str) -> list[str]:
    """Pieces of 16 characters of ``key``'s encoded forms (base64 at each alignment, hex,
    percent: ``secrets.encodings``) still in ``out``, its lines joined."""
    flat = out.replace("\n", "")
    return [
        form[i : i + 16]
        for form in secrets.encodings(key)
        for i in range(len(form) - 15)
        if form[i : i + 16] in flat
    ]


def _b64_wrapped(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(base64.b64encode(text.encode()).decode(), width))


@pytest.mark.parametrize(
    "echo",
    [
        # every character JSON-escaped, as an encoder that escapes all but letters may
        "".join(f"\\u{ord(c):04x}" for c in OPENAI),
        "".join(f"\\u{ord(c):04X}" for c in OPENAI),
        # one character in five escaped: no run of twelve is left plain
        "".join(f"\\u{ord(c):04x}" if i % 5 == 0 else c for i, c in enumerate(OPENAI)),
        # the upstream's JSON answer held as a string, escaped again
        json.dumps(json.dumps({"auth": "".join(f"\\u{ord(c):04x}" for c in OPENAI)})),
        # the key printed in short lines, and its header's base64 wrapped (MIME's 76 columns)
        "\n".join(OPENAI[i : i + 8] for i in range(0, len(OPENAI), 8)),
        _b64_wrapped(f"Authorization: Bearer {OPENAI}", 76),
        _b64_wrapped(f"Authorization: Bearer {OPENAI}", 20),
    ],
)
def test_a_key_escaped_or_broken_over_lines_is_scrubbed(keyed, echo):
    out = secrets.scrub(f"upstream said: {echo}.\nRequest refused.")
    assert "<redacted>" in out, out
    assert "upstream said: " in out and "Request refused." in out
    assert _pieces_left(out, OPENAI, 12) == [], out
    assert _encoded_left(out, OPENAI) == [], out


def test_text_with_escapes_or_lines_but_no_secret_keeps_its_characters(keyed):
    for text in (
        "C:\\Users\\studio\\x41 and caf\\u00e9 \\/ path",
        "line one\nline two of a page\n  indented",
        'a JSON text: {"a": "\\u0041"}',
    ):
        assert secrets.scrub(text) == text


def test_a_gateway_message_holding_the_upstream_answer_escaped_leaks_the_key_nowhere(afc):
    """A 401 from a gateway in front of OpenAI, its message the upstream's JSON answer as a
    string, the key JSON-escaped in it; and the same key's header base64-wrapped in the next
    answer: neither is in the ledger, stderr, 'afc show' or --json."""
    key = KEYS["OPENAI_API_KEY"]
    escaped = "".join(f"\\u{ord(c):04x}" for c in f"Bearer {key}")
    message = f'upstream answered {{"detail": "Invalid token {escaped}"}}'
    wrapped = _b64_wrapped(f"Authorization: Bearer {key}", 12)
    answers = iter(
        [
            reply(
                "500 Internal Server Error",
                json.dumps({"error": {"message": f"gateway: {wrapped}"}}).encode(),
            ),
            reply("401 Unauthorized", json.dumps({"error": {"message": message}}).encode()),
        ]
    )

    async def behaviour(head, body, writer) -> bool:
        writer.write(next(answers))
        await writer.drain()
        return True

    server = WireServer(behaviour)
    try:
        data = manifest([{"key": "shot", "prompt": "a lighthouse"}])
        data["defaults"]["chain"] = [
            {
                "provider": "openai",
                "model": "gpt-image-1",
                "attempts": 2,
                "backoff": {"base": 0.01, "cap": 0.02},
            }
        ]
        data["rates"] = [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}]
        afc.write_manifest(data)
        env = {**KEYS, "OPENAI_BASE_URL": server.url}
        said = [afc("submit", "manifest.yaml", env=env)]
        said += [afc(*args, env=env) for args in (("show", "shot"), ("show", "shot", "--json"))]
        said += [afc("status", "--json", env=env)]
        assert len(server.received) == 2
        conn = sqlite3.connect(afc.cwd / "afc.db")
        dump = "\n".join(conn.iterdump())
        conn.close()
        assert "upstream answered" in dump and "gateway: " in dump
        everything = "\n".join([dump] + [r.stdout + r.stderr for r in said])
        assert "<redacted>" in everything
        for text in (everything, everything.replace("\n", "").replace("\\n", "")):
            assert _pieces_left(text, key, 12) == []
            assert escaped[:60] not in text and escaped[60:] not in text
            assert _encoded_left(text, key) == []
    finally:
        server.stop()
