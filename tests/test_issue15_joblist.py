"""``jobs_from``: JSON Lines and CSV job lists, validated by the manifest's rules with line
numbers, admitted in chunks; a list with a bad line anywhere writes nothing."""

from __future__ import annotations

import json
import uuid

import pytest
import yaml
from conftest import jobs, manifest

from afc_cli.errors import ManifestError
from afc_cli.joblist import BOM_LINE
from afc_cli.manifest import JOB_ID_NAMESPACE, job_id_for, load_manifest, request_hash


def write_jsonl(path, rows) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def big_manifest(tmp_path, rows, *, inline=None, name="jobs.jsonl", **top):
    data = manifest(inline or [], jobs_from=name, **top)
    if not inline:
        del data["jobs"]
    (tmp_path / "manifest.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    if name.endswith(".jsonl"):
        write_jsonl(tmp_path / name, rows)
    return tmp_path / "manifest.yaml"


def test_a_job_list_resolves_like_inline_jobs(tmp_path):
    rows = [
        {"key": "a", "prompt": "one"},
        {"key": "b", "prompt": "two", "params": {"size": "16x16"}},
        {"key": "c", "prompt": "three", "output": "x/{key}.{ext}"},
    ]
    listed = load_manifest(big_manifest(tmp_path / "", rows))
    inline_dir = tmp_path / "inline"
    inline_dir.mkdir()
    (inline_dir / "m.yaml").write_text(yaml.safe_dump(manifest(rows), sort_keys=False))
    inline = load_manifest(inline_dir / "m.yaml")
    assert len(listed.jobs) == 3
    got = [(j.key, j.job_id, j.request_hash, j.output_key, j.index) for j in listed.jobs]
    want = [(j.key, j.job_id, j.request_hash, j.output_key, j.index) for j in inline.jobs]
    assert got == want
    # the fast canonical body is the canonical JSON of the body
    assert all(request_hash(j.body) == j.request_hash for j in listed.jobs)
    assert listed.chains == [inline.jobs[0].chain]


def test_inline_jobs_and_a_list_together_share_the_key_space(tmp_path):
    path = big_manifest(
        tmp_path,
        [{"key": "b", "prompt": "two"}, {"key": "a", "prompt": "again"}],
        inline=[{"key": "a", "prompt": "one"}],
    )
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert caught.value.problems == [
        "jobs.jsonl line 2 (key 'a'): field 'key': duplicate key, already used by job 0"
    ]


def test_problems_name_the_file_line_key_and_field(tmp_path):
    path = big_manifest(tmp_path, [])
    (tmp_path / "jobs.jsonl").write_text(
        '{"key": "ok", "prompt": "fine"}\n'
        "\n"
        '{"key": "p", "prompt": 7, "colour": "red"}\n'
        "not json\n"
        '{"key": "d", "prompt": "x", "prompt": "y"}\n'
        '{"key": "bad key", "prompt": "x"}\n'
        '{"key": "o", "prompt": "x", "output": "../{key}"}\n'
        '{"key": "ok", "prompt": "again"}\n'
        '{"key": "n", "prompt": "x", "params": {"size": "9999x1"}}\n'
        "[1, 2]\n"
    )
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    problems = caught.value.problems
    assert problems[:3] == [
        "jobs.jsonl line 3 (key 'p'): field 'prompt': Input should be a valid string",
        "jobs.jsonl line 3 (key 'p'): field 'colour': unknown field",
        "jobs.jsonl line 4: not valid JSON: Expecting value: line 1 column 1 (char 0)",
    ]
    assert problems[3] == "jobs.jsonl line 5: duplicate key 'prompt'"
    assert problems[4].startswith("jobs.jsonl line 6 (key 'bad key'): field 'key': must use")
    assert problems[5].startswith("jobs.jsonl line 7 (key 'o'): field 'output': renders to")
    assert problems[6] == (
        "jobs.jsonl line 8 (key 'ok'): field 'key': duplicate key, already used by "
        "jobs.jsonl line 1"
    )
    assert problems[7].startswith("jobs.jsonl line 9 (key 'n'): field 'params.size")
    assert problems[8] == "jobs.jsonl line 10: a job is a JSON object, got list"


def test_csv_lists_with_params_columns(tmp_path):
    data = manifest([], jobs_from="jobs.csv")
    del data["jobs"]
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    (tmp_path / "jobs.csv").write_text(
        "key,prompt,params.size,params.latency_s,params,output\n"
        'a,"a lighthouse, at dawn",16x16,0.5,,\n'
        'b,"two\nlines",,,"{""size"": ""8x8""}",out/{key}.{ext}\n'
        "\n"
        "c,three,007,,,\n"
    )
    with pytest.raises(ManifestError) as caught:
        load_manifest(tmp_path / "m.yaml")
    # '007' is text, not a number; the CSV's line numbers count the quoted newline
    assert caught.value.problems[0].startswith("jobs.csv line 6 (key 'c'): field 'params.size")
    (tmp_path / "jobs.csv").write_text(
        "key,prompt,params.size,params.latency_s,params,output\n"
        'a,"a lighthouse, at dawn",16x16,0.5,,\n'
        'b,"two\nlines",,,"{""size"": ""8x8""}",out/{key}.{ext}\n'
    )
    loaded = list(load_manifest(tmp_path / "m.yaml").jobs)
    assert [(j.key, j.prompt, j.params, j.output_key) for j in loaded] == [
        ("a", "a lighthouse, at dawn", {"size": "16x16", "latency_s": 0.5}, "b1/a.png"),
        ("b", "two\nlines", {"size": "8x8"}, "out/b.png"),
    ]


def test_csv_header_problems(tmp_path):
    data = manifest([], jobs_from="jobs.csv")
    del data["jobs"]
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    (tmp_path / "jobs.csv").write_text("key,prompt,colour\na,b,c\n")
    with pytest.raises(ManifestError) as caught:
        load_manifest(tmp_path / "m.yaml")
    assert caught.value.problems[0].startswith("jobs.csv line 1: unknown column(s) 'colour'")
    (tmp_path / "jobs.csv").write_text("key,prompt\na,b,c\n")
    with pytest.raises(ManifestError) as caught:
        load_manifest(tmp_path / "m.yaml")
    assert caught.value.problems == ["jobs.csv line 2: 3 cells where the header names 2"]


def test_missing_or_unknown_list_file(tmp_path):
    path = big_manifest(tmp_path, [], name="nowhere.jsonl")
    (tmp_path / "nowhere.jsonl").unlink()
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert caught.value.problems == [
        "field 'jobs_from': no file 'nowhere.jsonl' next to the manifest"
    ]
    # something is there, but not a file to read (found by an audit: "no file" misled)
    (tmp_path / "nowhere.jsonl").mkdir()
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert caught.value.problems == [
        "field 'jobs_from': 'nowhere.jsonl' next to the manifest is not a regular file"
    ]
    data = manifest([], jobs_from="jobs.txt")
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ManifestError) as caught:
        load_manifest(tmp_path / "m.yaml")
    assert "a job list is a .jsonl (JSON Lines) or .csv file" in caught.value.problems[0]
    data = manifest([])
    del data["jobs"]
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ManifestError) as caught:
        load_manifest(tmp_path / "m.yaml")
    assert caught.value.problems[0].startswith("field 'jobs': required field is missing")


def test_hostile_lines_are_problems_with_their_line_not_crashes(tmp_path):
    """Found by an outside audit: JSON nested thousands deep was a RecursionError, a line
    holding a JSON string showed the string as if it were afc's message."""
    path = big_manifest(tmp_path, [])
    deep = '{"key": "a", "prompt": "x", "params": ' + '{"a": ' * 3000 + "1" + "}" * 3001
    too_deep = '{"key": "c", "prompt": "x", "params": ' + "[" * 65 + "]" * 65 + "}"
    (tmp_path / "jobs.jsonl").write_text(
        f'{deep}\n"Set prompt to x"\n{too_deep}\n\ufeff{{"key": "b", "prompt": "x"}}\n'
    )
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert caught.value.problems == [
        "jobs.jsonl line 1: nested more than 64 levels deep",
        "jobs.jsonl line 2: a job is a JSON object, got str",
        "jobs.jsonl line 3: nested more than 64 levels deep",
        # a byte order mark opening a later line is named (outside audit 34e), where it read
        # 'not valid JSON: Expecting value: line 1 column 1 (char 0)'
        f"jobs.jsonl line 4: {BOM_LINE}",
    ]
    # a byte order mark opening the file is skipped, as in CSV and YAML
    (tmp_path / "jobs.jsonl").write_text('\ufeff{"key": "b", "prompt": "x"}\n')
    assert [job.key for job in load_manifest(path).jobs] == ["b"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        # a quote left open used to swallow the rest of the file into one cell: job b lost
        ('key,prompt\na,"unterminated\nb,y\n', "line 2: a quoted cell is never closed"),
        ("key,prompt\na," + "x" * 200_000 + "\nb,y\n", "line 2: a cell is longer than 131,072"),
        ('key,"prompt\na,b\n', "line 1: a quoted cell is never closed"),
        ('key,prompt\na,"x"y\n', "line 2: text after a quoted cell's closing quote"),
        ('key,prompt\nj1,"a cat" \n', "line 2: text after a quoted cell's closing quote"),
        (
            'key,params\na,"{""a"": ' + "[" * 70 + "]" * 70 + '}"\n',
            "line 2 (key 'a'): column 'params': nested",
        ),
    ],
)
def test_broken_csv_is_refused_with_its_line(tmp_path, text, problem):
    data = manifest([], jobs_from="jobs.csv")
    del data["jobs"]
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    (tmp_path / "jobs.csv").write_text(text)
    with pytest.raises(ManifestError) as caught:
        load_manifest(tmp_path / "m.yaml")
    assert caught.value.problems[0].startswith(f"jobs.csv {problem}"), caught.value.problems


@pytest.mark.parametrize("text", ["", "\n  \n"])
def test_an_empty_job_list_is_refused_like_an_empty_jobs_list(tmp_path, text):
    path = big_manifest(tmp_path, [])
    (tmp_path / "jobs.jsonl").write_text(text)
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert caught.value.problems == ["field 'jobs_from': 'jobs.jsonl' holds no job"]
    # beside inline jobs, an empty list is fine
    path = big_manifest(tmp_path, [], inline=[{"key": "a", "prompt": "x"}])
    (tmp_path / "jobs.jsonl").write_text(text)
    assert [job.key for job in load_manifest(path).jobs] == ["a"]


def test_job_id_matches_uuid5():
    for batch, key in [("b", "k"), ("trailer-shots", "shot-001"), ("b:1", "é-ü")]:
        assert job_id_for(batch, key) == str(uuid.uuid5(JOB_ID_NAMESPACE, f"{batch}\x00{key}"))


def test_submit_a_job_list_end_to_end_and_replay(afc):
    rows = jobs(30)
    data = manifest([], jobs_from="jobs.jsonl")
    del data["jobs"]
    afc.write_manifest(data)
    write_jsonl(afc.cwd / "jobs.jsonl", rows)
    first = afc.json("submit", "manifest.yaml")
    assert first["counts"] == {"succeeded": 30}
    assert first["admitted"] == {"new": 30, "replayed": 0, "conflicts": 0}
    assert afc.rows("SELECT COUNT(*), MIN(seq), MAX(seq) FROM jobs") == [(30, 0, 29)]
    assert len(list(afc.outputs().rglob("*.png"))) == 30
    again = afc.json("submit", "manifest.yaml")
    assert again["admitted"] == {"new": 0, "replayed": 30, "conflicts": 0}
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(30,)]


def test_a_bad_line_anywhere_writes_nothing(afc):
    rows = jobs(12_000)  # more than one admission chunk
    rows[11_500]["params"] = {"size": "big"}
    data = manifest([], jobs_from="jobs.jsonl")
    del data["jobs"]
    afc.write_manifest(data)
    write_jsonl(afc.cwd / "jobs.jsonl", rows)
    result = afc("submit", "manifest.yaml", "--no-run")
    assert result.returncode == 2
    assert "jobs.jsonl line 11501 (key 'shot-11501'): field 'params.size" in result.stderr
    assert not (afc.cwd / "afc.db").exists()


def test_a_list_changed_after_its_check_is_admitted_as_checked(tmp_path):
    """The list is read once: what was validated is what gets admitted."""
    path = big_manifest(tmp_path, [{"key": "a", "prompt": "one"}])
    loaded = load_manifest(path)
    write_jsonl(tmp_path / "jobs.jsonl", [{"key": "zzz", "prompt": 5}])
    assert [j.key for j in loaded.jobs] == ["a"]
    assert [j.key for j in loaded.jobs] == ["a"]  # iterable more than once
