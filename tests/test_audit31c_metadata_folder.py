"""Outside audit 31c: an output key whose folder is named as another output's metadata file
(``x.png.afc.json/y.png`` beside ``x.png``) is refused: file storage keeps each output's
metadata beside it as NAME.afc.json, and the folder took that name first; x.png's render was
paid for, then failed at store, its metadata 'cannot be read'."""

from __future__ import annotations

from conftest import manifest


def test_a_folder_named_as_metadata_is_refused_before_anything_is_paid(afc):
    afc.write_manifest(
        manifest(
            [
                {"key": "a", "prompt": "p", "output": "o/x.png"},
                {"key": "b", "prompt": "p", "output": "o/x.png.afc.json/y.png"},
            ]
        )
    )
    calls = afc.cwd / "calls.log"
    result = afc("submit", "manifest.yaml", env={"AFC_LOCAL_CALL_LOG": str(calls)})
    assert result.returncode == 2, result.stderr
    assert (
        "job 1 (key 'b'): field 'output': renders to 'o/x.png.afc.json/y.png'; names ending in "
        ".afc.json are reserved for metadata"
    ) in result.stderr, result.stderr
    assert not calls.exists() or calls.read_text() == ""
    assert not (afc.cwd / "afc.db").exists() and not afc.outputs().exists()
