"""Outside audit 46a: a reference image named as a storage is named, ``file://./refs/x.png``
or ``~/refs/x.png``, is read where it says.

README's manifest names its storage ``file://./renders`` (relative to the manifest's folder)
and storage takes ``file://~/renders`` (a home folder); an input ``path`` takes "a file:// URL
of this host". Written the same way, ``inputs: [{path: file://./refs/palette.png}]`` was
refused as "names a file on another host" (RFC 8089 reads '.' as a host name), and
``path: ~/refs/palette.png`` as "no such file", the file right there: both are now read as
storage reads them. A host named in earnest (``file://nas/refs/x.png``) is still refused,
saying how to name a local file."""

from __future__ import annotations

from pathlib import Path

from conftest import manifest

from afc_cli.providers.local import render_png


def _refs(folder: Path) -> bytes:
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    data = render_png("palette", 8, 8)
    (folder / "refs" / "palette.png").write_bytes(data)
    return data


def test_file_urls_and_home_paths_are_read_as_storage_reads_them(afc, tmp_path):
    _refs(afc.cwd)
    home = tmp_path / "home"
    _refs(home)
    afc.write_manifest(
        manifest(
            [
                {"key": "a", "prompt": "a", "inputs": [{"path": "file://./refs/palette.png"}]},
                {"key": "b", "prompt": "b", "inputs": [{"path": "file://~/refs/palette.png"}]},
                {"key": "c", "prompt": "c", "inputs": [{"path": "~/refs/palette.png"}]},
            ],
            storage="file://./renders",
        )
    )
    done = afc("submit", "manifest.yaml", env={"HOME": str(home)})
    assert done.returncode == 0, done.stderr
    paths = {key: path for key, path in afc.rows("SELECT key, inputs_json FROM jobs")}
    assert str(afc.cwd / "refs" / "palette.png") in paths["a"], paths
    assert str(home / "refs" / "palette.png") in paths["b"], paths
    assert str(home / "refs" / "palette.png") in paths["c"], paths
    assert afc.rows("SELECT COUNT(*) FROM attempts WHERE inputs_json IS NOT NULL") == [(3,)]


def test_a_file_url_naming_another_host_is_refused_saying_how_to_name_a_local_file(afc):
    _refs(afc.cwd)
    afc.write_manifest(
        manifest([{"key": "a", "prompt": "a", "inputs": [{"path": "file://nas/refs/x.png"}]}])
    )
    refused = afc("submit", "manifest.yaml")
    assert refused.returncode == 2, refused.stderr
    said = " ".join(refused.stderr.split())
    assert "names a file on another host ('nas')" in said, said
    assert "a path (relative to the manifest's folder, or absolute)" in said, said
    assert not (afc.cwd / "afc.db").exists()
