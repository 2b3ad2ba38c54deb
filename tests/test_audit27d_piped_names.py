"""Outside audit 27d: a table on a pipe is headed by the --json field names.

README ("Reading the output": "On a pipe or in a file every table is plain text ... one header
line of column names (the --json field names where a column holds one field as it is") and
docs/design.md ("What a person sees"). 'afc show KEY' piped headed its attempts' error class,
HTTP status and cost source 'class', 'http' and 'source', where 'afc show KEY --json' names
them error_class, http_status and cost_source: a script reading the columns by those names
found none of them."""

from __future__ import annotations

from conftest import jobs, manifest

# columns that hold a field written for a person, or two fields in one, not as --json has it
FORMATTED = {"model", "waited", "duration"}


def test_the_attempts_table_of_afc_show_on_a_pipe_uses_the_json_names(afc):
    afc.write_manifest(manifest(jobs(1, fail=["rate_limited"])))
    assert afc("submit", "manifest.yaml").returncode == 0
    story = afc.json("show", "shot-001")
    shown = afc("show", "shot-001")
    assert shown.returncode == 0, shown
    lines = shown.stdout.splitlines()
    header = lines[lines.index("attempts") + 1].split("\t")
    assert header[0] == "number", header
    named = set(header) - FORMATTED
    assert {"error_class", "http_status", "cost_source"} <= named, header
    assert named <= set(story["attempts"][0]), (header, sorted(story["attempts"][0]))
    # and a row holds those fields as --json has them
    first = dict(zip(header, lines[lines.index("attempts") + 2].split("\t"), strict=True))
    attempt = story["attempts"][0]
    assert first["error_class"] == attempt["error_class"] == "rate_limited"
    assert first["http_status"] == str(attempt["http_status"])
    assert first["cost_source"] == attempt["cost_source"]
