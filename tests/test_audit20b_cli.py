"""Outside audit 20b: the command-line contract against SPEC.md, through the real ``afc``
command: what a person reads on a terminal or a pipe, and what a script reads."""

from __future__ import annotations

from conftest import manifest


def test_show_writes_a_person_s_words_in_their_own_script_not_as_json_escapes(afc):
    """README: text is written as backslash escapes only where the output's encoding cannot
    write it. 'afc show' printed its events' details (and its steps' and attempts' usage) with
    JSON's ASCII escapes on a UTF-8 terminal or pipe: a reviewer's rejection reason '暗すぎる',
    their name 'José', read '\\u6697\\u3059\\u304e\\u308b' and 'Jos\\u00e9' in the job's
    story, while the decision line above said them plainly."""
    afc.write_manifest(manifest([{"key": "frame", "prompt": "p", "review": True}]))
    assert afc("submit", "manifest.yaml").returncode == 0
    reason = "暗すぎる — trop sombre, «refaire» ☕"
    rejected = afc("review", "reject", "frame", "--reason", reason, "--by", "José")
    assert rejected.returncode == 0, rejected.stderr
    shown = afc("show", "frame", env={"PYTHONIOENCODING": "utf-8"})
    assert shown.returncode == 0, shown.stderr
    [event] = [line for line in shown.stdout.splitlines() if "Z  rejected  " in line]
    assert reason in event and "José" in event, event
    assert "\\u" not in shown.stdout, shown.stdout
