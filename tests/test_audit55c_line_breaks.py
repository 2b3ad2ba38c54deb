"""Outside audit 55c (secrets, searched for with generated inputs): a key quoted back broken
over lines by a bare carriage return (an old Mac's line ending; a terminal dump's) was shown and
kept whole. The scrubber joins a text's lines to find a key printed in short lines, but took
only a line feed (alone or after a CR) as a line break: split every ten characters by a CR, no
run of twelve (``PARTIAL_CHARS``) was left to find and the key stayed, in the ledger, on stderr,
in ``--json`` and ``afc show``, its CRs shown as ``\\x0d``."""

from __future__ import annotations

import sqlite3
import string

from conftest import manifest
from fakeproviders import KEYS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from afc_cli import secrets

ALNUM = string.ascii_letters + string.digits
B64 = ALNUM + "+/"


def _text(alphabet: str, size: int) -> st.SearchStrategy[str]:
    return st.text(alphabet=alphabet, min_size=size, max_size=size)


# each provider's key shape (README "Providers"), the AWS secret and session token, by the variable
# that holds it
KEY_SHAPES = {
    "OPENAI_API_KEY": st.one_of(
        _text(ALNUM + "_-", 48).map(lambda t: "sk-proj-" + t), _text(ALNUM, 48).map("sk-".__add__)
    ),
    "REPLICATE_API_TOKEN": _text(ALNUM, 37).map("r8_".__add__),
    "FAL_KEY": st.tuples(st.uuids(), _text("0123456789abcdef", 32)).map(lambda t: f"{t[0]}:{t[1]}"),
    "GEMINI_API_KEY": _text(ALNUM + "_-", 35).map("AIza".__add__),
    "AWS_SECRET_ACCESS_KEY": _text(B64, 40),
    "AWS_SESSION_TOKEN": _text(B64, 120).map(lambda t: t + "=="),
}


def _left(out: str, key: str, run: int = 8) -> list[str]:
    """Pieces of ``key`` of ``run`` characters still in ``out``, its CRs and escapes of them
    taken out, in any case."""
    flat = out.lower().replace("\r", "").replace("\\x0d", "").replace("\\r", "")
    key = key.lower()
    return [key[i : i + run] for i in range(len(key) - run + 1) if key[i : i + run] in flat]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.sampled_from(sorted(KEY_SHAPES)).flatmap(
        lambda name: st.tuples(st.just(name), KEY_SHAPES[name])
    ),
    st.integers(min_value=2, max_value=11),
    st.sampled_from(["\r", "\\r", "\\\\r", "\r ", " \r\t"]),
    st.booleans(),
)
def test_a_key_broken_by_bare_carriage_returns_is_scrubbed(named, width, brk, header):
    name, key = named
    quoted = f"Bearer {key}" if header else key
    lines = brk.join(quoted[i : i + width] for i in range(0, len(quoted), width))
    saved = {n: secrets.os.environ.pop(n, None) for n in KEY_SHAPES}
    try:
        secrets.os.environ[name] = key
        secrets.reset()
        out = secrets.scrub(f'{{"error": {{"message": "Incorrect key: {lines}."}}}}')
    finally:
        for n, value in saved.items():
            secrets.os.environ.pop(n, None)
            if value is not None:
                secrets.os.environ[n] = value
        secrets.reset()
    assert "<redacted>" in out and out.startswith('{"error": {"message": "Incorrect key: ')
    assert _left(out, key) == [], out


def test_a_key_quoted_back_over_bare_carriage_returns_leaks_nowhere(afc, fake):
    """The fake OpenAI's 401 quotes the Authorization header back in lines of ten characters
    broken by a CR ("echo-key-cr"): the key is in no output, ledger byte or --json."""
    key = KEYS["OPENAI_API_KEY"]
    data = manifest([{"key": "shot", "prompt": "echo-key-cr please"}])
    data["defaults"]["chain"] = [{"provider": "openai", "model": "gpt-image-1"}]
    data["rates"] = [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}]
    afc.write_manifest(data)
    outputs = []
    for args in (
        ("submit", "manifest.yaml"),
        ("status", "--json"),
        ("show", "shot"),
        ("show", "shot", "--json"),
    ):
        result = afc(*args)
        outputs.append(result.stdout + result.stderr)
    everything = "\n".join(outputs)
    assert "Incorrect API key provided: Bearer <redacted>" in everything, everything
    conn = sqlite3.connect(afc.cwd / "afc.db")
    dump = "\n".join(conn.iterdump())
    conn.close()
    assert "Incorrect API key provided" in dump
    files = b"".join(path.read_bytes() for path in afc.cwd.glob("afc.db*") if path.is_file())
    for text in (everything, dump, files.decode("latin-1")):
        assert _left(text, key) == [], text[-3000:]
