"""Outside audit 31c: a manifest (or AFC_CONFIG rate file) whose text afc cannot read is
refused naming the line and column of what it met, as a job list's is, never by a byte
offset or PyYAML's '<unicode string>, position N'."""

from __future__ import annotations

import codecs

MANIFEST = (
    "version: 1\n"
    "batch: b1\n"
    "defaults:\n"
    "  chain: [{provider: local, model: demo-v1}]\n"
    "jobs:\n"
    '  - {key: a, prompt: "a lighthouse at dawn"}\n'
    '  - {key: b, prompt: "PROMPT"}\n'
)


def _refused(afc, data: bytes, name: str = "shots.yaml"):
    (afc.cwd / name).write_bytes(data)
    result = afc("submit", name, "--no-run")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert not (afc.cwd / "afc.db").exists()
    return result.stderr


def test_a_manifest_saved_as_latin_1_names_the_line_column_and_byte(afc):
    """A prompt typed in an editor saving Latin-1 (or Windows-1252) was refused 'not UTF-8
    text (byte 143)': a byte count into the file, no line, no byte, no fix."""
    data = MANIFEST.replace("PROMPT", "caf\u00e9 au lait").encode("latin-1")
    said = _refused(afc, data)
    assert "shots.yaml" in said
    assert "line 7, column 26: not UTF-8 text: byte 0xE9" in said, said
    assert "save the manifest as UTF-8" in said
    assert "(byte " not in said


def test_a_manifest_saved_as_utf_16_is_named_so(afc):
    """Windows' 'Unicode' text, with its byte order mark or without one."""
    with_bom = codecs.BOM_UTF16_LE + MANIFEST.replace("PROMPT", "x").encode("utf-16-le")
    said = _refused(afc, with_bom)
    assert "line 1, column 1: not UTF-8 text: byte 0xFF" in said, said
    assert "UTF-16" in said
    without = MANIFEST.replace("PROMPT", "x").encode("utf-16-le")
    said = _refused(afc, without)
    assert "<unicode string>" not in said and "position" not in said, said
    assert "line 1, column 2:" in said and "UTF-16" in said, said


def test_a_control_character_pasted_into_a_prompt_names_its_line_and_column(afc):
    """A vertical tab (or an ESC, a NUL) pasted into a prompt: PyYAML refuses it, and afc
    said 'not valid YAML: unacceptable character #x000b: control characters are not allowed
    in "<unicode string>", position 143' (a byte offset, under the C loader), on two lines."""
    data = MANIFEST.replace("PROMPT", "caf\u00e9 \u00e0 la\x0bplage").encode()
    said = _refused(afc, data)
    assert "<unicode string>" not in said and "position" not in said, said
    assert "line 7, column 32: not valid YAML: control character U+000B" in said, said
    assert len(said.strip().splitlines()) == 2, said


def test_the_rate_file_is_named_the_same_way(afc):
    (afc.cwd / "rates.yaml").write_bytes(
        b'rates:\n  - {provider: local, model: demo-v1, per_image: "0.01"}  # \xe9t\xe9\n'
    )
    (afc.cwd / "shots.yaml").write_text(MANIFEST.replace("PROMPT", "x"))
    result = afc("submit", "shots.yaml", "--no-run", env={"AFC_CONFIG": "rates.yaml"})
    assert result.returncode == 2, result.stderr
    assert "invalid AFC_CONFIG rate file rates.yaml" in result.stderr
    assert "line 2, column 61: not UTF-8 text: byte 0xE9" in result.stderr, result.stderr
    assert "save the rate file as UTF-8" in result.stderr
