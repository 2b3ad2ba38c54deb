"""Outside audit 55c (secrets, searched for with generated inputs): a key quoted back base64'd
and cut short (a gateway's log of the Authorization header it was sent, 'QmVhcmVyIHNrLXBy…',
cut at a column; a proxy's Basic credentials shortened) was shown and kept: the scrubber
knew a key's base64 only whole, and pieces of twelve characters (``PARTIAL_CHARS``) only of
the key as written. Pieces of its base64 (each alignment) and hex are now known too."""

from __future__ import annotations

import base64
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from afc_cli import secrets

ALNUM = string.ascii_letters + string.digits
KEY_SHAPES = {
    "OPENAI_API_KEY": st.text(alphabet=ALNUM + "_-", min_size=48, max_size=48).map(
        "sk-proj-".__add__
    ),
    "REPLICATE_API_TOKEN": st.text(alphabet=ALNUM, min_size=37, max_size=37).map("r8_".__add__),
    "FAL_KEY": st.tuples(
        st.uuids(), st.text(alphabet="0123456789abcdef", min_size=32, max_size=32)
    ).map(lambda t: f"{t[0]}:{t[1]}"),
    "GEMINI_API_KEY": st.text(alphabet=ALNUM + "_-", min_size=35, max_size=35).map("AIza".__add__),
    "AWS_SESSION_TOKEN": st.text(alphabet=ALNUM + "+/", min_size=120, max_size=120),
}
HEADERS = ["Authorization: Bearer {}", "Authorization: Key {}", "x-goog-api-key: {}", "{}"]


def _encoded_left(out: str, key: str, run: int = 16) -> list[str]:
    """Pieces of ``run`` characters of ``key``'s base64 (each alignment) or hex still in
    ``out``."""
    return [
        form[i : i + run]
        for form in secrets.encodings(key)
        if not form.startswith("%")
        for i in range(len(form) - run + 1)
        if form[i : i + run] in out
    ]


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.sampled_from(sorted(KEY_SHAPES)).flatmap(lambda n: st.tuples(st.just(n), KEY_SHAPES[n])),
    st.sampled_from(HEADERS),
    st.sampled_from(["base64", "urlsafe", "hex"]),
    st.floats(min_value=0.3, max_value=0.95),
)
def test_a_key_quoted_back_encoded_and_cut_short_is_scrubbed(named, header, encoding, kept):
    name, key = named
    raw = header.format(key).encode()
    encoded = {
        "base64": base64.b64encode,
        "urlsafe": base64.urlsafe_b64encode,
        "hex": lambda b: b.hex().encode(),
    }[encoding](raw).decode()
    cut = encoded[: int(len(encoded) * kept)]
    saved = {n: secrets.os.environ.pop(n, None) for n in KEY_SHAPES}
    try:
        secrets.os.environ[name] = key
        secrets.reset()
        out = secrets.scrub(f"gateway log: header {cut}... (truncated)")
    finally:
        for n, old in saved.items():
            secrets.os.environ.pop(n, None)
            if old is not None:
                secrets.os.environ[n] = old
        secrets.reset()
    assert out.startswith("gateway log: header ") and out.endswith("... (truncated)"), out
    assert _encoded_left(out, key) == [], out


def test_ordinary_base64_and_hex_are_left_alone(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" * 2)
    secrets.reset()
    try:
        for text in (
            base64.b64encode(b"an image's bytes, nothing secret in them at all").decode(),
            "sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        ):
            assert secrets.scrub(text) == text
    finally:
        secrets.reset()
