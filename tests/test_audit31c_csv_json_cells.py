"""Outside audit 31c: a CSV job list's JSON column holding plain text (a spreadsheet's
'needs' cell written 'style-frame') is refused saying the column holds JSON, with an example;
afc said only "column 'needs': not valid JSON (Expecting value: line 1 column 1 (char 0))",
a parser's words for a cell a person typed as a spreadsheet invites."""

from __future__ import annotations

import yaml


def test_a_json_column_holding_plain_text_says_what_it_takes(afc):
    (afc.cwd / "jobs.csv").write_text(
        "key,prompt,needs,review\n"
        "style-frame,a palette,,true\n"
        "shot-1,a lighthouse,style-frame,\n"
        "shot-2,a harbour,,yes\n"
    )
    manifest = {
        "version": 1,
        "batch": "b1",
        "defaults": {"chain": [{"provider": "local", "model": "m1"}]},
        "jobs_from": "jobs.csv",
    }
    (afc.cwd / "shots.yaml").write_text(yaml.safe_dump(manifest))
    result = afc("submit", "shots.yaml")
    assert result.returncode == 2, result.stderr
    assert (
        "jobs.csv line 3 (key 'shot-1'): column 'needs': not valid JSON (Expecting value: "
        'line 1 column 1 (char 0)); this column holds JSON text, such as ["style-frame"] (a '
        "list, in double quotes)"
    ) in result.stderr, result.stderr
    assert (
        "jobs.csv line 4 (key 'shot-2'): column 'review': not valid JSON" in result.stderr
        and "such as true" in result.stderr
    ), result.stderr
    assert not (afc.cwd / "afc.db").exists()
