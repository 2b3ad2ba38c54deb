"""A job key outside the key alphabet is refused saying the alphabet is ASCII and naming the
first character outside it: a Hebrew key was refused 'must use letters, digits and . _ - :
only', which read as if its letters counted (noticed by outside audit 59d)."""

from __future__ import annotations

from conftest import manifest


def test_a_key_of_other_letters_is_told_the_alphabet_is_ascii(afc):
    afc.write_manifest(manifest([{"key": "שוט-1", "prompt": "p"}, {"key": "café", "prompt": "p"}]))
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 2, result.stderr
    assert "must use ASCII letters (A-Z, a-z), digits and . _ - : only, not 'ש'" in result.stderr
    assert "not 'é'" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not (afc.cwd / "afc.db").exists()
