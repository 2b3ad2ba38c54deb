"""A prompt edited between nights in a way that prints alike, end to end through ``afc`` (an
outside audit). A prompt pasted again from a document (a no-break space where a space was),
or a job list saved by a tool that decomposes accents (``e`` and a combining acute for
``é``), is another request: an IDEMPOTENCY_CONFLICT, rightly. But the conflict named the
change as ``prompt: "a lighthouse at dawn" -> "a lighthouse at dawn"``, both sides printing
the same, in ``afc submit`` and ``afc plan``: a change it showed none of, leaving the person
to guess what to undo. Such values are now shown with the differing characters escaped."""

from __future__ import annotations

import unicodedata

from conftest import manifest


def test_a_change_that_prints_alike_is_shown_with_its_characters_escaped(afc):
    data = manifest(
        [
            {"key": "a", "prompt": "a lighthouse at dawn"},
            {"key": "b", "prompt": "a café at night"},
            {"key": "c", "prompt": "a 灯台 at dawn"},
        ]
    )
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0

    data["jobs"][0]["prompt"] = "a lighthouse\u00a0at dawn"  # a no-break space
    data["jobs"][1]["prompt"] = unicodedata.normalize("NFD", "a café at night")
    data["jobs"][2]["prompt"] = "a 灯台\u200b at dawn"  # a zero-width space
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 3, result.stderr
    plan = afc("plan", "manifest.yaml").stdout
    for said in (result.stderr, plan):
        assert 'prompt: "a lighthouse at dawn" -> "a lighthouse\\u00a0at dawn"' in said, said
        assert 'prompt: "a café at night" -> "a cafe\\u0301 at night"' in said, said
        # only the characters that print alike are escaped: the rest reads as written
        assert 'prompt: "a 灯台 at dawn" -> "a 灯台\\u200b at dawn"' in said, said
    # --json keeps whole values, as they are
    conflicts = afc.json("submit", "manifest.yaml", expect=3)["conflicts"]
    assert conflicts[0]["changes"][0]["new"] == "a lighthouse\u00a0at dawn"


def test_a_visible_change_is_shown_as_written(afc):
    data = manifest([{"key": "a", "prompt": "a café at dawn"}])
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    data["jobs"][0]["prompt"] = "a café at dusk"
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 3
    assert 'prompt: "a café at dawn" -> "a café at dusk"' in result.stderr
