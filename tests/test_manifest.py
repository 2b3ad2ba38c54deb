"""Manifest resolution, canonical request hashes and deterministic job ids."""

from __future__ import annotations

import pytest
import yaml
from conftest import jobs, manifest

from afc_cli.errors import ManifestError
from afc_cli.manifest import job_id_for, load_manifest, output_key_problem


def write(tmp_path, data, name="m.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_explicit_defaults_and_key_order_do_not_change_the_hash(tmp_path):
    implicit = manifest([{"key": "a", "prompt": "p", "params": {"seed": 1, "fail": []}}])
    implicit["defaults"]["chain"] = [{"provider": "local", "model": "m1"}]
    explicit = manifest(
        [
            {
                "params": {"fail": [], "seed": 1},
                "prompt": "p",
                "key": "a",
                "output": "{batch}/{key}.{ext}",
            }
        ]
    )
    explicit["defaults"]["chain"] = [
        {
            "model": "m1",
            "provider": "local",
            "attempts": 3,
            "backoff": {"base": 2.0, "cap": 60.0},
        }
    ]
    a = load_manifest(write(tmp_path, implicit, "a.yaml")).jobs[0]
    b = load_manifest(write(tmp_path, explicit, "b.yaml")).jobs[0]
    assert a.request_hash == b.request_hash


def test_what_determines_the_output_changes_the_hash(tmp_path):
    base = load_manifest(write(tmp_path, manifest(jobs(1)))).jobs[0].request_hash
    for change in (
        lambda d: d["jobs"][0].update(prompt="other"),
        lambda d: d["jobs"][0].update(params={"size": "32x32"}),
        lambda d: d["defaults"].update(output="{key}.{ext}"),
        lambda d: d["defaults"]["chain"][0].update(model="m2"),
    ):
        data = manifest(jobs(1))
        change(data)
        assert load_manifest(write(tmp_path, data)).jobs[0].request_hash != base
    # a rate card does not determine the output
    data = manifest(jobs(1))
    data["rates"][0]["per_image"] = "0.07"
    assert load_manifest(write(tmp_path, data)).jobs[0].request_hash == base


def test_job_id_is_deterministic_per_batch_and_key():
    assert job_id_for("b", "k") == job_id_for("b", "k")
    assert job_id_for("b", "k") != job_id_for("c", "k")
    # pinned: a rebuilt ledger must derive the very ids that earlier outputs' metadata names
    assert job_id_for("b", "k") == "bee2db0f-d3d5-5598-8dcc-691d9c656ebf"


def test_job_params_merge_over_defaults(tmp_path):
    data = manifest([{"key": "a", "prompt": "p", "params": {"size": "32x32"}}])
    data["defaults"]["params"] = {"size": "64x64", "latency_s": 0.01}
    job = load_manifest(write(tmp_path, data)).jobs[0]
    assert job.params == {"size": "32x32", "latency_s": 0.01}


@pytest.mark.parametrize(
    "key,problem",
    [
        ("a/b.png", None),
        ("../x", "'..'"),
        ("/abs", "absolute"),
        ("a//b", "empty"),
        ("a\\b", "absolute"),
        ("C:x", "absolute"),
        ("x.png.afc.json", "reserved"),
        ("", "empty"),
    ],
)
def test_output_key_rules(key, problem):
    found = output_key_problem(key)
    assert (found is None) if problem is None else (problem in found)


def test_many_problems_are_listed_at_once(tmp_path):
    data = manifest(jobs(3))
    data["jobs"][0]["prompt"] = 5
    data["jobs"][2]["colour"] = "red"
    with pytest.raises(ManifestError) as info:
        load_manifest(write(tmp_path, data))
    text = info.value.message
    assert "job 0 (key 'shot-001'): field 'prompt'" in text
    assert "job 2 (key 'shot-003'): field 'colour': unknown field" in text
    # semantic checks list every job's problems too
    data = manifest(jobs(3))
    data["jobs"][0]["params"] = {"latency_s": -1}
    data["jobs"][2]["params"] = {"size": "huge"}
    with pytest.raises(ManifestError) as info:
        load_manifest(write(tmp_path, data))
    text = info.value.message
    assert "job 0 (key 'shot-001'): field 'params.latency_s" in text
    assert "job 2 (key 'shot-003'): field 'params.size" in text


def test_a_fields_problem_and_a_problem_across_jobs_are_listed_in_one_try(tmp_path):
    """An outside audit: a manifest with a mistyped field in one job and a duplicate key or an
    unknown need in others named only the first kind; the rest came on the next try. The
    checks across jobs now run on the jobs whose fields are well formed, knowing the others'
    keys: a need of the refused job is not called unknown, a duplicate of it is named."""
    data = manifest(jobs(5))
    data["jobs"][1]["prompt"] = 5  # a field's type
    data["jobs"][2]["key"] = "shot-001"  # a duplicate of job 0
    data["jobs"][3]["needs"] = ["shot-002", "nope"]  # the refused job, and an unknown key
    data["jobs"][4]["key"] = "shot-002"  # a duplicate of the refused job
    with pytest.raises(ManifestError) as info:
        load_manifest(write(tmp_path, data))
    lines = info.value.message.splitlines()[1:]
    assert lines == [
        "  - job 1 (key 'shot-002'): field 'prompt': Input should be a valid string",
        "  - job 2 (key 'shot-001'): field 'key': duplicate key, already used by job 0",
        "  - job 4 (key 'shot-002'): field 'key': duplicate key, already used by job 1",
        "  - job 3 (key 'shot-004'): field 'needs[1]': unknown key 'nope'; needs and inputs"
        " name jobs of this manifest",
    ], lines
    # a problem outside the jobs (the defaults every job uses) is listed alone, as before
    data["defaults"]["chain"] = [{"provider": "local", "model": "m", "attempts": "2"}]
    with pytest.raises(ManifestError) as info:
        load_manifest(write(tmp_path, data))
    assert "duplicate key" not in info.value.message
    assert "field 'defaults.chain[0].attempts'" in info.value.message
