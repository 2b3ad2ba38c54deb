"""No secret is kept or shown (issue 12): the scrubber's rules, and a provider that quotes the
API key back, end to end through the real command: the key appears in no ledger row, output
stream, --json, afc show, webhooks list or webhook body."""

from __future__ import annotations

import base64
import sqlite3

import pytest
from conftest import manifest
from fakeproviders import KEYS, FakeProviders
from receiver import Receiver

from afc_cli import secrets
from afc_cli.errors import StorageError
from afc_cli.providers.base import ProviderError

SECRET = "whsec_" + base64.b64encode(b"afc secrets test, 32 bytes long!").decode()


@pytest.fixture
def clean_secrets(monkeypatch):
    secrets.reset()
    yield monkeypatch
    secrets.reset()


@pytest.mark.parametrize(
    ("text", "gone"),
    [
        ("Incorrect API key provided: Bearer sk-proj-abcDEF0123456789xyz", "abcDEF0123456789"),
        ("Incorrect API key provided: sk-abcdef0123456789.", "abcdef0123456789"),
        ("Unauthenticated: Token r8_0123456789abcdefABCDEF", "0123456789abcdef"),
        ("bad key r8_0123456789abcdef", "0123456789abcdef"),
        ("Authorization: Key 1234abcd-12ab:0123456789abcdef", "0123456789abcdef"),
        ("GET https://x.googleapis.com/v1?key=AIzaSyA0123456789abcdef&alt=json", "0123456789"),
        ("https://minio:supersecretpw@minio.internal:9000/bucket", "supersecretpw"),
        ("s3://AKIAEXAMPLE:wJalrXUtnFEMI/K7MDENG/bPxRfiCY@bucket/p", "K7MDENG"),
        ("PUT /b/k?X-Amz-Signature=deadbeef0123&X-Amz-Date=x", "deadbeef0123"),
        # Azure SAS (OpenAI's DALL-E image URLs) and Google's signed URLs
        ("https://oai.blob.core.windows.net/i/x.png?se=2026&sp=r&sig=AbC%2Fdef0123", "AbC"),
        ("https://storage.googleapis.com/b/x.png?X-Goog-Signature=0a1b2c3d4e5f", "0a1b2c"),
        ("secret whsec_c2VjcmV0c2VjcmV0", "c2VjcmV0c2VjcmV0"),
        # the short names a URL's password takes (an FTP or old CGI gateway's, ODBC's PWD=)
        ("https://gw.example/render?user=studio&passwd=hunter2hunter2", "hunter2"),
        ("https://gw.example/render?user=studio&pwd=hunter2hunter2&x=1", "hunter2"),
    ],
)
def test_token_shapes_are_scrubbed(clean_secrets, text, gone):
    out = secrets.scrub(text)
    assert gone not in out and "<redacted>" in out


def test_libpqs_password_variable_is_a_secret(clean_secrets):
    """afc's own message about a PostgreSQL ledger URL tells the user to put the password in
    PGPASSWORD (afc_cli/ledger_file.py), but only names ending in _PASSWORD were read as
    secrets: its value, quoted by a proxy's or a script's error, was shown (outside audit
    24a). The other variable names stay as they were: a name merely ending in 'PASSWORD'
    after letters (SHOWPASSWORD) is no secret's."""
    clean_secrets.setenv("PGPASSWORD", "pg-hunter2-value")
    clean_secrets.setenv("SHOWPASSWORD", "yes-show-it-please")
    out = secrets.scrub("auth failed for pg-hunter2-value; yes-show-it-please")
    assert "hunter2" not in out and "yes-show-it-please" in out


def test_configured_secret_values_are_scrubbed_wherever_they_appear(clean_secrets):
    clean_secrets.setenv("FAL_KEY", "plainid01:plainsecret99")
    clean_secrets.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY")
    clean_secrets.setenv("STUDIO_HOOK", "not-shaped-like-a-token")
    secrets.register("STUDIO_HOOK")
    text = (
        "id plainid01 and plainsecret99; aws wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY; "
        "hook not-shaped-like-a-token"
    )
    out = secrets.scrub(text)
    for value in ("plainid01", "plainsecret99", "wJalrXUtn", "not-shaped-like-a-token"):
        assert value not in out
    # ordinary words and keys survive
    assert (
        secrets.scrub("key shot-001 failed: Key not found") == "key shot-001 failed: Key not found"
    )


FAL = "3f6c1a2b-9d4e-4f0a-8b7c-1d2e3f4a5b6c:0123456789abcdef0123456789abcdef"
OPENAI = "sk-proj-AbCdEf0123456789GhIjKl"


@pytest.mark.parametrize(
    ("echo", "gone"),
    [
        # fal's key id and most of its secret: the shape is matched before the id alone
        (f"Invalid credentials: Key {FAL[:-3]}***", FAL.split(":")[1][:20]),
        # split by a line break, cut short, in another letter case
        (f"Bearer {OPENAI[:12]}\n{OPENAI[12:]}", OPENAI[12:]),
        (f"key was {OPENAI[:-4]}...", OPENAI[4:-4]),
        (OPENAI.upper(), OPENAI.upper()[3:]),
        # encoded: Basic auth (base64 of user:key), hex, percent, HTML references, zero-width
        (
            "Basic " + base64.b64encode(f"user:{OPENAI}".encode()).decode(),
            base64.b64encode(f"user:{OPENAI}".encode()).decode()[12:28],
        ),
        (OPENAI.encode().hex(), OPENAI.encode().hex()[6:]),
        ("".join(f"%{b:02X}" for b in OPENAI.encode()), "%30%31%32"),
        ("".join(f"&#{ord(c)};" for c in OPENAI), "&#48;&#49;"),
        (OPENAI[:9] + "\u200b" + OPENAI[9:], OPENAI[9:]),
    ],
)
def test_a_key_echoed_in_part_or_encoded_is_scrubbed(clean_secrets, echo, gone):
    clean_secrets.setenv("FAL_KEY", FAL)
    clean_secrets.setenv("OPENAI_API_KEY", OPENAI)
    out = secrets.scrub(echo)
    assert gone not in out and "<redacted>" in out, out
    # nothing of twelve characters of either key is left, in any case
    low = out.lower()
    for key in (FAL, OPENAI):
        key = key.lower()
        assert not any(key[i : i + 12] in low for i in range(len(key) - 11)), out


def test_pieces_of_other_key_variables_leave_ordinary_text_alone(clean_secrets):
    """Only known keys are matched in part: another ``*_KEY`` variable may hold a path."""
    clean_secrets.setenv("DEPLOY_KEY", "/home/studio/.ssh/id_ed25519")
    text = "cannot write /home/studio/.cache/afc: 50% full & slow"
    assert secrets.scrub(text) == text
    assert secrets.scrub("key at /home/studio/.ssh/id_ed25519") == "key at <redacted>"


def test_base64_at_every_alignment_is_found(clean_secrets):
    clean_secrets.setenv("REPLICATE_API_TOKEN", "r8_zyxwvutsrqponmlkjihgfedcba")
    for prefix in ("", "a", "ab", "abc"):
        encoded = base64.b64encode(f"{prefix}r8_zyxwvutsrqponmlkjihgfedcba!".encode()).decode()
        out = secrets.scrub(f"header was {encoded}")
        assert "<redacted>" in out and len(out) < len(encoded), (prefix, out)


def test_errors_scrub_their_message_where_it_enters(clean_secrets):
    clean_secrets.setenv("OPENAI_API_KEY", "sk-live-secret-value-0001")
    assert "secret-value" not in ProviderError("auth", "no: sk-live-secret-value-0001").message
    assert "secret-value" not in str(StorageError("at https://a:sk-live-secret-value-0001@h/"))


def test_a_provider_quoting_the_key_back_leaks_it_nowhere(afc):
    key = KEYS["OPENAI_API_KEY"]
    server = FakeProviders().start()
    receiver = Receiver().start()
    try:
        afc.env.update(server.env())
        afc.env["AFC_HOOK_SECRET"] = SECRET
        data = manifest([{"key": "shot", "prompt": "echo-key please"}])
        data["defaults"]["chain"] = [{"provider": "openai", "model": "gpt-image-1"}]
        data["rates"] = [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}]
        data["webhook"] = {"url": receiver.url, "secret_env": "AFC_HOOK_SECRET", "timeout_s": 2}
        afc.write_manifest(data)
        outputs = []
        for args in (
            ("submit", "manifest.yaml"),
            ("submit", "manifest.yaml", "--json"),
            ("status",),
            ("status", "--json"),
            ("show", "shot"),
            ("show", "shot", "--json"),
            ("show", "shot", "-v"),
            ("webhooks", "list"),
            ("webhooks", "list", "--json"),
            ("costs", "report", "--json"),
            ("resume", "-v"),
        ):
            result = afc(*args)
            assert "Traceback" not in result.stderr
            outputs.append(result.stdout + result.stderr)
        assert server.counts["openai"] >= 1
        everything = "\n".join(outputs)
        assert "Incorrect API key provided: Bearer <redacted>" in everything  # the cause stays
        conn = sqlite3.connect(afc.cwd / "afc.db")
        dump = "\n".join(conn.iterdump())
        conn.close()
        assert "Incorrect API key provided" in dump
        bodies = [r.body.decode() for r in receiver.received]
        assert bodies and all("Incorrect API key provided" in b for b in bodies)
        for text in (everything, dump, *bodies):
            for secret in (key, key[3:], SECRET, SECRET[6:]):
                assert secret not in text
    finally:
        server.stop()
        receiver.stop()


def test_a_paid_answer_quoting_the_key_in_its_id_and_usage_leaves_no_key_in_the_ledger(afc):
    """A success whose ``x-request-id`` and usage counts carry the Authorization header: the
    attempt is recorded (paid, its id and usage kept scrubbed), the key is in no ledger row."""
    key = KEYS["OPENAI_API_KEY"]
    server = FakeProviders().start()
    try:
        afc.env.update(server.env())
        data = manifest([{"key": "shot", "prompt": "paid-echo please"}])
        data["defaults"]["chain"] = [{"provider": "openai", "model": "gpt-image-1"}]
        data["rates"] = [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}]
        afc.write_manifest(data)
        result = afc("submit", "manifest.yaml")
        assert result.returncode == 0, result.stderr
        shown = afc("show", "shot", "--json").stdout
        assert server.counts["openai"] == 1
        rows = afc.rows("SELECT status, provider_request_id, usage_json FROM attempts")
        assert len(rows) == 1 and rows[0][0] == "succeeded"
        assert rows[0][1] == "Bearer <redacted>" and "<redacted>" in rows[0][2]
        conn = sqlite3.connect(afc.cwd / "afc.db")
        dump = "\n".join(conn.iterdump())
        conn.close()
        for text in (dump, shown, result.stdout + result.stderr):
            for secret in (key, key[3:], key.upper()[3:]):
                assert secret not in text
    finally:
        server.stop()


def test_a_malformed_webhook_secret_is_refused_before_anything_is_written(afc):
    receiver = Receiver().start()
    try:
        data = manifest([{"key": "a", "prompt": "p"}])
        data["webhook"] = {"url": receiver.url, "secret_env": "AFC_HOOK_SECRET"}
        afc.write_manifest(data)
        for bad in ("whsec_!!!not-base64", "plain-secret-no-prefix", "whsec_"):
            result = afc("submit", "manifest.yaml", env={"AFC_HOOK_SECRET": bad})
            assert result.returncode == 2, result.stderr
            assert "AFC_HOOK_SECRET" in result.stderr and "malformed" in result.stderr
            assert bad[6:] not in result.stderr or not bad[6:]
            assert not (afc.cwd / "afc.db").exists()
        # admitted with a good secret, resumed with a broken one: refused before the run too
        assert (
            afc("submit", "manifest.yaml", "--no-run", env={"AFC_HOOK_SECRET": SECRET}).returncode
            == 0
        )
        result = afc("resume", env={"AFC_HOOK_SECRET": "whsec_!!!"})
        assert result.returncode == 2 and "malformed" in result.stderr
        assert afc.rows("SELECT status FROM jobs") == [("queued",)]
        assert not receiver.received
    finally:
        receiver.stop()


def test_json_output_scrubs_a_secret_that_json_would_escape(clean_secrets, capsys):
    """A key holding a quote or a non-ASCII character is escaped by JSON (\\" or \\u00e9), so a
    scrub of the encoded text alone would miss it; emit_json scrubs each string first."""
    from afc_cli.output import emit_json

    key = 'odd"key\\with\u00e9-0123456789'
    clean_secrets.setenv("STUDIO_API_KEY", key)
    emit_json({"error": f"provider said: bad key {key}", "nested": [{"m": key}]})
    out = capsys.readouterr().out
    assert "0123456789" not in out
    assert out.count("<redacted>") == 2


def test_text_that_hides_no_secret_keeps_its_characters(clean_secrets, capsys):
    """A review found every shown string stripped of zero-width characters (an emoji's
    joiner, a Persian non-joiner), and a --json document whose escapes were decoded whole,
    invalid JSON, when one escape revealed a key."""
    import json

    from afc_cli.output import emit_json

    clean_secrets.setenv("OPENAI_API_KEY", OPENAI)
    prompt = (
        "family \U0001f468\u200d\U0001f469 \u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645 50%25"
    )
    assert secrets.scrub(prompt) == prompt
    hidden = OPENAI[:9] + "\u200b" + OPENAI[9:]
    assert OPENAI[9:] not in secrets.scrub(f"{prompt} {hidden}")
    emit_json({"a": "x%22y &quot;", "b%20Bearer%20" + OPENAI: 1, "c": [prompt]})
    out = capsys.readouterr().out
    parsed = json.loads(out)  # still JSON
    assert parsed["a"] == "x%22y &quot;" and parsed["c"] == [prompt]
    assert OPENAI[4:] not in out and "<redacted>" in next(iter(k for k in parsed if k != "a"))


def test_a_character_whose_lower_case_is_longer_does_not_shift_the_match(clean_secrets):
    """``'İ'.lower()`` is two characters: matching the lowered text at the original's
    positions leaked part of a key and cut ordinary text (a review)."""
    clean_secrets.setenv("OPENAI_API_KEY", "sk-proj-AbCdEf0123456789GhIjKl")
    for n in (3, 12):
        out = secrets.scrub("\u0130" * n + " echo proj-AbCdEf012345 end")
        assert out == "\u0130" * n + " echo <redacted> end", out
    out = secrets.scrub("\u0130\u0130 SK-PROJ-ABCDEF0123456789GHIJKL!")
    assert out == "\u0130\u0130 <redacted>!", out


def test_scrub_data_scrubs_each_distinct_string_once_and_every_copy_of_it(clean_secrets):
    """``afc status --json`` of 5,000 jobs spent 1.5 of its 1.8 s scrubbing the same keys and
    values again in every row (0.8 s now). Each distinct string is scrubbed once a call, and
    every place it appears gets the scrubbed text, a secret in a key or a value included."""
    clean_secrets.setenv("STUDIO_HOOK", "not-shaped-like-a-token")
    secrets.register("STUDIO_HOOK")
    calls: list[str] = []
    real = secrets.scrub

    def counted(text, **kwargs):
        calls.append(text)
        return real(text, **kwargs)

    clean_secrets.setattr(secrets, "scrub", counted)
    rows = [
        {"key": f"shot-{i}", "status": "failed", "error": "hook not-shaped-like-a-token", "n": i}
        for i in range(100)
    ]
    out = secrets.scrub_data({"jobs": rows, "not-shaped-like-a-token": ["sk-abcdef0123456789"]})
    # six keys (jobs, key, status, error, n, the secret), 100 shot-i, and three other values
    assert len(calls) == len(set(calls)) == 6 + 100 + 3
    assert all(row["error"] == "hook <redacted>" for row in out["jobs"])
    assert [row["key"] for row in out["jobs"]] == [f"shot-{i}" for i in range(100)]
    assert out["<redacted>"] == ["sk-<redacted>"]


@pytest.mark.parametrize(
    "prose",
    [
        "a flag bearer marching through the rain",
        "the ring bearer standing by the altar",
        "Standard-bearer Overlooking the valley",
        "bearer well-dressed, in oils",
    ],
)
def test_bearer_in_prose_is_left_alone(clean_secrets, prose):
    """A prompt that says "bearer" was shown masked ("a flag bearer <redacted> through the
    rain") in every table, --json and report: a bearer token holds a digit, a symbol other
    than '-' or a capital past its first letter; a lowercase word is prose."""
    assert secrets.scrub(prose) == prose


@pytest.mark.parametrize(
    "token", ["abcdefgh1", "abcdefghIJ", "eyJhbGciOi.e30.x", "abc.defghijk", "ABCDEFGHIJ"]
)
def test_bearer_tokens_of_every_shape_are_still_masked(clean_secrets, token):
    for said in (f"Bearer {token}", f"bearer {token}", f"Authorization: BEARER {token}"):
        assert token not in secrets.scrub(said), said
