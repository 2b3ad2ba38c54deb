"""Outside audit 34e: two job lists joined with 'cat a.csv b.csv > jobs.csv', each saved with
a byte order mark (Excel's "CSV UTF-8", Notepad's UTF-8), hold a byte order mark at the start
of the second list's first line, invisible in an editor. The CSV list's repeated header row
was then not recognised as one ('\\ufeffkey' is not 'key'): it was refused as a job whose key
'\\ufeffkey' uses characters other than letters and digits and whose output key holds an
invisible character; a JSON Lines line was refused 'not valid JSON: Expecting value: line 1
column 1 (char 0)' though the line reads as valid JSON. Both now say what is there."""

from __future__ import annotations

import yaml

BOM = "\ufeff"


def _submit(afc, name: str):
    manifest = {
        "version": 1,
        "batch": "b1",
        "defaults": {"chain": [{"provider": "local", "model": "m1"}]},
        "jobs_from": name,
    }
    (afc.cwd / "shots.yaml").write_text(yaml.safe_dump(manifest))
    calls = afc.cwd / "calls.log"
    result = afc("submit", "shots.yaml", env={"AFC_LOCAL_CALL_LOG": str(calls)})
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert not (afc.cwd / "afc.db").exists()
    assert not calls.exists() or calls.read_text() == ""
    return result


def test_a_csv_header_row_again_after_a_byte_order_mark_is_named_so(afc):
    (afc.cwd / "jobs.csv").write_text(
        f"{BOM}key,prompt\na,a lighthouse\n{BOM}key,prompt\nb,a harbour\n", encoding="utf-8"
    )
    result = _submit(afc, "jobs.csv")
    assert "jobs.csv line 3" in result.stderr, result.stderr
    assert "the header row again" in result.stderr, result.stderr
    assert "byte order mark" in result.stderr, result.stderr
    # not refused as a job: its key's characters, its output key's invisible character
    assert "must use ASCII letters" not in result.stderr, result.stderr
    assert "invisible" not in result.stderr, result.stderr


def test_a_json_lines_line_opened_by_a_byte_order_mark_is_named_so(afc):
    (afc.cwd / "jobs.jsonl").write_text(
        f'{BOM}{{"key": "a", "prompt": "a lighthouse"}}\n'
        f'{BOM}{{"key": "b", "prompt": "a harbour"}}\n',
        encoding="utf-8",
    )
    result = _submit(afc, "jobs.jsonl")
    assert "jobs.jsonl line 2" in result.stderr, result.stderr
    assert "byte order mark" in result.stderr, result.stderr
    assert "Expecting value" not in result.stderr, result.stderr
