"""``afc plan`` names a jobs_from list's conflicting job by file and line, as ``afc submit``
names it (tests/test_audit30b_joblist_conflicts.py): in a catalogue of thousands of lines the
key alone sends a user searching. A job written in the manifest itself has no line to name."""

from __future__ import annotations

import json

from conftest import manifest


def test_plan_names_a_lists_conflicting_job_by_file_and_line(afc):
    top = manifest([{"key": "inline", "prompt": "zero"}], jobs_from="jobs.csv")
    afc.write_manifest(top)
    (afc.cwd / "jobs.csv").write_text("key,prompt\na,one\nb,two\n")
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    (afc.cwd / "jobs.csv").write_text('key,prompt\na,one\nb,"two, at dusk"\n')
    top["jobs"][0]["prompt"] = "zero, at noon"
    afc.write_manifest(top)

    result = afc("plan", "manifest.yaml")
    assert "  conflict b (jobs.csv line 3): changed prompt" in result.stdout, result.stdout
    # the manifest's own job: no list, no line
    assert "  conflict inline: changed prompt" in result.stdout, result.stdout

    result = afc("plan", "manifest.yaml", "--json")
    jobs = {job["key"]: job for job in json.loads(result.stdout)["jobs"]}
    assert jobs["b"]["action"] == "conflict"
    assert jobs["b"]["where"] == "jobs.csv line 3"
    assert "where" not in jobs["inline"] and "where" not in jobs["a"]
