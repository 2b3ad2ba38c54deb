"""Outside audit 56c (secrets): a password that is a plain word was masked wherever that word
stood. ``PGPASSWORD=postgres`` (the PostgreSQL image's own default) made every ledger message
read 'cannot connect to the ledger <redacted>ql://...', and a studio's
``DATABASE_URL=postgresql://afc:password@db/afc`` showed a job 'password-reset' as
'<redacted>-reset' in every table and --json: output ruined, and the password told to
anyone who saw the word missing. A value made of letters only and shorter than
``secrets.WORD_CHARS`` is a word: masked only where it stands as a credential (a URL's
``user:password@``, a ``?password=`` parameter, a ``Basic`` header), as a short password is."""

from __future__ import annotations

import base64
import socket

import pytest
from conftest import manifest

from afc_cli import secrets


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_word_for_pgpassword_leaves_postgresql_in_messages(afc):
    url = f"postgresql://afc@127.0.0.1:{_closed_port()}/afc"
    result = afc("status", "--ledger", url, env={"PGPASSWORD": "postgres"})
    assert result.returncode == 1, result.stderr
    assert f"cannot connect to the ledger {url}:" in result.stderr, result.stderr
    assert "<redacted>" not in result.stderr


def test_a_word_for_a_database_password_leaves_job_keys_and_prompts_whole(afc):
    env = {"DATABASE_URL": "postgresql://afc:password@db.internal/afc"}
    afc.write_manifest(manifest([{"key": "password-reset", "prompt": "a Password screen"}]))
    result = afc("submit", "manifest.yaml", env=env)
    assert result.returncode == 0, result.stderr
    shown = afc.json("status", env=env)
    story = afc("show", "password-reset", env=env).stdout
    assert [job["key"] for job in shown["jobs"]] == ["password-reset"], shown
    assert "a Password screen" in story and "<redacted>" not in story, story


@pytest.fixture
def fresh(monkeypatch):
    yield monkeypatch
    monkeypatch.undo()
    secrets.reset()


def test_a_word_password_is_still_masked_where_it_stands_as_a_credential(fresh):
    fresh.setenv("DATABASE_URL", "postgresql://afc:postgres@db.internal/afc")
    fresh.setenv("PGPASSWORD", "postgres")
    secrets.reset()
    basic = base64.b64encode(b"afc:postgres").decode()
    for text, kept in (
        ("connect postgresql://afc:postgres@db.internal/afc", "connect postgresql://"),
        ("GET /x?password=postgres HTTP/1.1", "GET /x?password="),
        (f"407 Basic {basic}", "407 Basic "),
    ):
        out = secrets.scrub(text)
        assert "postgres@" not in out and "=postgres" not in out and basic not in out, out
        assert out.startswith(kept) and "<redacted>" in out, out
    # a password that is no plain word is still masked wherever it is quoted
    fresh.setenv("PGPASSWORD", "pg5tgres-pr0d")
    secrets.reset()
    assert secrets.scrub("bad password pg5tgres-pr0d") == "bad password <redacted>"
    # and so is a long one of letters only (a pass phrase): no word of prose is that long
    fresh.setenv("PGPASSWORD", "correcthorsebatterystaple")
    secrets.reset()
    assert secrets.scrub("pw correcthorsebatterystaple") == "pw <redacted>"
