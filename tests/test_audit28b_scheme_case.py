"""A storage URL's scheme is read whatever its case, as the ledger's is (outside audit 28b)."""

from __future__ import annotations

from conftest import jobs, manifest

from afc_cli.storage import normalize_url


def test_a_storage_scheme_in_capitals_is_the_same_storage(afc):
    """RFC 3986 3.1: schemes are case-insensitive. 'SQLITE:///afc.db' was taken for the
    ledger while 'FILE://...' was refused, exit 2, as 'the FILE:// scheme is not supported
    by this version of afc (supported: file://PATH, ...)'."""
    afc.write_manifest(manifest(jobs(1)))
    stored = afc("submit", "manifest.yaml", "--storage", "FILE://./renders")
    assert stored.returncode == 0, stored.stderr
    assert [p.name for p in (afc.cwd / "renders").rglob("*.png")] == ["shot-001.png"]
    # recorded as file://, so the batch's next run, with the URL written either way, is the
    # same storage, not another one refused
    assert afc.rows("SELECT storage FROM batches") == [(f"file://{afc.cwd}/renders",)]
    again = afc("submit", "manifest.yaml", "--storage", "file://./renders")
    assert again.returncode == 0, again.stderr
    assert normalize_url("S3://bucket/prefix") == "s3://bucket/prefix"
    assert normalize_url("File:///tmp/x") == "file:///tmp/x"
