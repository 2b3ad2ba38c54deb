"""Outside audit 27d: a CSV job list's problem names the job's key.

README ("Big job lists": problems name the file and line, `jobs.jsonl line 11501 (key
'shot-11501'): field 'params.size': ...`) and the manifest's contract: an error names the
file, the job (index and key) and the field. A CSV row whose JSON cell could not be read (a
'params' cell that is no JSON, or not an object beside a params.NAME column, or a param given
in both) was named by its line alone, though its key cell was read: a person fixing a list
exported from a spreadsheet searched for the line number."""

from __future__ import annotations

from conftest import manifest


def _listed(afc, data: bytes) -> None:
    top = manifest([], jobs_from="jobs.csv")
    del top["jobs"]
    afc.write_manifest(top)
    (afc.cwd / "jobs.csv").write_bytes(data)


def test_a_csv_row_whose_json_cell_cannot_be_read_is_named_by_its_key(afc):
    _listed(
        afc,
        b"key,prompt,params,params.seed\n"
        b'ok,x,"{""size"": ""64x64""}",\n'
        b'shot-002,x,"{size: 64x64}",\n'
        b'shot-003,x,"[1]",7\n'
        b',x,"{bad",\n',
    )
    for command in (("submit", "manifest.yaml"), ("plan", "manifest.yaml")):
        result = afc(*command)
        assert result.returncode == 2, result
        lines = result.stderr.splitlines()
        assert any(
            line.startswith("  - jobs.csv line 3 (key 'shot-002'): column 'params': not valid JSON")
            for line in lines
        ), result.stderr
        assert (
            "  - jobs.csv line 4 (key 'shot-003'): column 'params': must be a JSON object" in lines
        ), result.stderr
        # a row with no key is named by its line, as before
        assert any(
            line.startswith("  - jobs.csv line 5: column 'params': not valid JSON")
            for line in lines
        ), result.stderr
        assert not (afc.cwd / "afc.db").exists()
