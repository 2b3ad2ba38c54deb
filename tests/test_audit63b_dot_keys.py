"""Outside audit 63b: a job keyed '.' or '..', or a batch so named, was refused "must use
letters, digits and . _ - : only (it names files and objects)": a key of those characters
only, told to use them. The problem now says why: '.' and '..' name a folder itself and its
parent, not a file or object of their own."""

from __future__ import annotations

from conftest import manifest


def test_a_dot_key_or_batch_is_refused_saying_why(afc):
    afc.write_manifest(
        manifest([{"key": ".", "prompt": "p"}, {"key": "..", "prompt": "p"}], batch="..")
    )
    result = afc("submit", "manifest.yaml", "--no-run")
    said = result.stderr
    assert result.returncode == 2, said
    assert "letters, digits and . _ - : only" not in said, said
    for where, name in (
        ("job 0 (key '.'): field 'key'", "."),
        ("job 1 (key '..'): field 'key'", ".."),
    ):
        assert (
            f"{where}: {name!r} names a folder (itself or its parent), not a file or object of "
            "its own; use a name with a letter or digit"
        ) in said, said
    assert "field 'batch': '..' names a folder" in said, said
    assert not (afc.cwd / "afc.db").exists()
