"""Outside audit 31c: 'file://localhost/PATH', the file URL RFC 8089 (which README follows for
file URLs' percent-encoding) gives for the absolute path /PATH, as some tools write it, is that
folder: afc read 'localhost/PATH' as a path relative to the working directory, and stored a
batch's outputs in ./localhost/... while the person looked for them in /PATH."""

from __future__ import annotations

from conftest import manifest


def test_a_file_url_naming_localhost_is_its_absolute_path(afc, tmp_path_factory):
    renders = tmp_path_factory.mktemp("renders")
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    result = afc("submit", "manifest.yaml", "--storage", f"file://localhost{renders}", "--json")
    assert result.returncode == 0, result.stderr
    assert (renders / "b1" / "a.png").is_file()
    assert not (afc.cwd / "localhost").exists()
    status = afc.json("status")
    assert status["jobs"][0]["status"] == "succeeded"
    [output] = afc.json("outputs")["outputs"]
    assert output["url"] == f"file://{renders}/b1/a.png", output
