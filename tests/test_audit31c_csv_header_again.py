"""Outside audit 31c: a CSV job list whose header row comes again (two exports joined with
'cat a.csv b.csv > jobs.csv') is refused at that line: the row was read as a job keyed 'key'
whose prompt is 'prompt', admitted and rendered, paid for."""

from __future__ import annotations

import yaml


def test_a_header_row_repeated_in_a_csv_list_is_refused_at_its_line(afc):
    (afc.cwd / "jobs.csv").write_text(
        "key,prompt,params.size\na,a lighthouse,64x64\nkey,prompt,params.size\nb,a harbour,64x64\n"
    )
    (afc.cwd / "jobs2.csv").write_text("key,prompt\na,a lighthouse\nkey,prompt\nb,a harbour\n")
    calls = afc.cwd / "calls.log"
    for name in ("jobs.csv", "jobs2.csv"):
        manifest = {
            "version": 1,
            "batch": "b1",
            "defaults": {"chain": [{"provider": "local", "model": "m1"}]},
            "jobs_from": name,
        }
        (afc.cwd / "shots.yaml").write_text(yaml.safe_dump(manifest))
        result = afc("submit", "shots.yaml", env={"AFC_LOCAL_CALL_LOG": str(calls)})
        assert result.returncode == 2, result.stderr
        assert f"{name} line 3 (key 'key'): the header row again" in result.stderr, result.stderr
        assert not (afc.cwd / "afc.db").exists()
        assert not calls.exists() or calls.read_text() == ""
