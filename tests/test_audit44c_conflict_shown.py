"""Outside audit 44c: an IDEMPOTENCY_CONFLICT message shows the change it names. Values
longer than the message keeps (60 characters) were cut to their start, so a prompt edited
near its end, as prompts are (a style appended, '35mm film' made '70mm film'), was said as
``changed prompt: "a lighthouse on a rocky headland at dawn, waves breaking b… -> "a
lighthouse on a rocky headland at dawn, waves breaking b…``: the same text both sides, the
change nowhere (README, Idempotency: the message names what changed, with old and new
values). Both sides are now shown from a little before their first difference."""

from __future__ import annotations

from conftest import manifest

PROMPT = "a lighthouse on a rocky headland at dawn, waves breaking below, gulls overhead, "


def test_a_long_prompt_changed_near_its_end_shows_the_change(afc):
    data = manifest([{"key": "shot", "prompt": PROMPT + "35mm film"}])
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    data["jobs"][0]["prompt"] = PROMPT + "70mm film, muted colours"
    afc.write_manifest(data)
    for command in (("submit", "manifest.yaml"), ("plan", "manifest.yaml")):
        result = afc(*command)
        said = result.stderr if command[0] == "submit" else result.stdout
        (line,) = [x for x in said.splitlines() if "changed prompt" in x]
        old, _, new = line.partition("changed prompt: ")[2].partition(" -> ")
        assert "35mm film" in old and "70mm film" not in old, line
        assert "70mm film, muted colours" in new, line
        assert len(old) <= 60, line  # still shortened
    # the whole values stay in --json
    (conflict,) = afc.json("submit", "manifest.yaml", expect=3)["conflicts"]
    assert conflict["changes"] == [
        {"field": "prompt", "old": PROMPT + "35mm film", "new": PROMPT + "70mm film, muted colours"}
    ]


def test_a_change_within_the_shown_start_is_shown_as_before(afc):
    data = manifest([{"key": "shot", "prompt": "a lighthouse at dawn, " + "very " * 30}])
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    data["jobs"][0]["prompt"] = "a lighthouse at dusk, " + "very " * 30
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 3
    assert 'prompt: "a lighthouse at dawn, very very' in result.stderr, result.stderr
    assert '-> "a lighthouse at dusk, very very' in result.stderr, result.stderr
