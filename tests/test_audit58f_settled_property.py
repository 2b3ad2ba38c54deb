"""``jsonout._settled``'s scrub of a streamed row (its strings scrubbed a second time) against
the row's whole encoded text scrubbed a second time, the path it stands for (outside audit
58f): generated rows of configured keys whole, cut, in capitals, base64, hex,
percent-encoded and split by a line break, glued to token shapes, masks, quotes,
backslashes and non-ASCII, and numbers holding a numeric secret or a piece of one. The
bytes must be the same, and no key, nor a twelve-character piece of one, reach them."""

from __future__ import annotations

import base64

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from afc_cli import jsonout, secrets

KEYS = {
    "OPENAI_API_KEY": "sk-proj-Ab3dEf9hIjKlMn0pQrStUv",
    "REPLICATE_API_TOKEN": "r8_Zx8yW7vU6tS5rQ4pO3nM2lK1",
    "FAL_KEY": "1234abcd-5678:9f8e7d6c5b4a39281706",
    "AFC_SERVE_TOKEN": "31415926535897932384",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
}
FORMS = [
    form
    for key in KEYS.values()
    for form in (
        key,
        key.upper(),
        key[3:15],
        key[-13:],
        base64.b64encode(key.encode()).decode(),
        key.encode().hex(),
        key.encode().hex()[5:19],
        key.replace("/", "%2F").replace(":", "%3A"),
        key[:10] + "\n" + key[10:],
    )
]
ATOMS = [
    *FORMS,
    *("sk-", "AIza", "AIzaSyA1234567890abcdef", "Bearer ", "bearer ", "Basic ", "Key ", "Token "),
    *("://", "https://u:", "@", ":", "?key=", "&token=", secrets.REDACTED, "r8_", "whsec_"),
    *(" ", "x", "-", "_", "/", "=", "%", "\\", '"', "é", "0", "12"),
    *("/services/T1234567/B1234567/", "/api/webhooks/1234567890123456/"),
    "hooks.slack.com/workflows/T1234567/",
]
NUMBERS = [31415926535897932384, 3141592653589793, 1234567890123, 12, 1.5, 123456789012.0]

texts = st.lists(st.sampled_from(ATOMS), max_size=5).map("".join)
leaves = texts | st.sampled_from(NUMBERS) | st.none() | st.booleans()
values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
rows = st.lists(st.dictionaries(texts, values, min_size=1, max_size=4), min_size=1, max_size=4)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=rows)
def test_a_row_settled_is_its_whole_text_scrubbed(monkeypatch, rows):
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    secrets.reset()
    try:
        assert secrets.json_structure_free()
        seen, settled_seen, again = {}, {}, {}
        for number, row in enumerate(rows):
            before = ",\n    " if number else "\n    "
            whole = secrets.scrub(before + jsonout._encoded(row, seen, "    "), decode=False)
            got = jsonout._item(row, settled_seen, again, before)
            assert got == whole
            low = got.lower()
            for key in KEYS.values():
                for i in range(len(key) - 11):
                    assert key[i : i + 12].lower() not in low
    finally:
        monkeypatch.undo()
        secrets.reset()
