"""Outside audit 34e: a job list that is an archive, not text (an Excel workbook, a zip
archive, named jobs.csv; a list compressed with gzip, named jobs.jsonl), was refused as
'not UTF-8 text: byte 0x84 at column 13 (saved as Latin-1 or Windows-1252? save the list as
UTF-8)', or, its first bytes being ASCII up to its first line break, as a list with unknown
columns or a NUL: advice that does not apply. It is now named for what it is."""

from __future__ import annotations

import gzip
import io
import zipfile

import pytest
import yaml

from afc_cli.errors import ManifestError
from afc_cli.manifest import load_manifest


def _workbook() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as book:
        book.writestr("[Content_Types].xml", '<?xml version="1.0"?>' * 50)
        book.writestr("xl/workbook.xml", "<workbook/>" * 100)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("name", "data", "said"),
    [
        ("jobs.csv", _workbook(), "is a zip archive (an Excel workbook?), not CSV text"),
        ("jobs.jsonl", _workbook(), "is a zip archive, not JSON Lines text"),
        ("jobs.jsonl", gzip.compress(b'{"key": "a", "prompt": "x"}\n'), "is compressed"),
        ("jobs.csv", gzip.compress(b"key,prompt\na,x\n"), "is compressed"),
    ],
)
def test_an_archive_named_as_a_job_list_is_named_so(tmp_path, name, data, said):
    (tmp_path / name).write_bytes(data)
    manifest = {
        "version": 1,
        "batch": "b1",
        "defaults": {"chain": [{"provider": "local", "model": "m1"}]},
        "jobs_from": name,
    }
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(manifest))
    with pytest.raises(ManifestError) as caught:
        load_manifest(tmp_path / "m.yaml")
    assert len(caught.value.problems) == 1, caught.value.problems
    problem = caught.value.problems[0]
    assert problem.startswith(f"field 'jobs_from': {name!r} {said}"), problem
    assert "Latin-1" not in problem
