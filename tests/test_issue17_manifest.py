"""The manifest side of issue 17, in-process: needs, inputs and review resolved, job inputs
hashed after the jobs they use (wherever those stand), from YAML and from a job list."""

from __future__ import annotations

import json

import pytest

from afc_cli.errors import ManifestError
from afc_cli.manifest import dependency_order, load_manifest, request_hash

HEAD = "version: 1\nbatch: b\ndefaults:\n  chain: [{provider: local, model: m}]\n"


def test_a_job_input_listed_before_its_job_is_hashed_over_that_jobs_request(tmp_path):
    (tmp_path / "m.yaml").write_text(
        HEAD
        + "  review: true\n"
        + "jobs:\n"
        + "  - {key: shot, prompt: s, review: false, inputs: [{job: style}]}\n"
        + "jobs_from: list.jsonl\n"
    )
    (tmp_path / "list.jsonl").write_text(
        json.dumps({"key": "style", "prompt": "st"})
        + "\n"
        + json.dumps(
            {"key": "late", "prompt": "l", "inputs": [{"job": "shot"}], "needs": ["b/style"]}
        )
        + "\n"
    )
    jobs = {job.key: job for job in load_manifest(tmp_path / "m.yaml").jobs}
    assert [jobs[k].review for k in ("style", "shot", "late")] == [True, False, True]
    assert jobs["shot"].needs == ("style",)
    assert jobs["late"].needs == ("style", "shot")  # explicit needs first, then job inputs
    assert jobs["shot"].body["inputs"] == [
        {"job": {"batch": "b", "key": "style", "request_hash": jobs["style"].request_hash}}
    ]
    assert jobs["shot"].request_hash == request_hash(jobs["shot"].body)
    assert jobs["late"].body["inputs"][0]["job"]["request_hash"] == jobs["shot"].request_hash
    assert dependency_order(jobs.values()) == [["style"], ["shot"], ["late"]]
    # jobs_from lines are numbered after every inline job (the deferred one too)
    assert sorted(job.index for job in jobs.values()) == [0, 1, 2]


def test_a_job_without_the_new_fields_keeps_its_request_hash(tmp_path):
    """Nothing changes for a manifest written before issue 17: same body, same hash."""
    (tmp_path / "m.yaml").write_text(HEAD + "jobs:\n  - {key: a, prompt: p}\n")
    job = load_manifest(tmp_path / "m.yaml").jobs[0]
    assert "inputs" not in job.body
    assert job.request_hash == request_hash(job.body)
    assert (job.review, job.needs, job.inputs) == (False, (), None)


def test_a_path_input_is_hashed_by_content_not_by_name(tmp_path):
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "ref.png").write_bytes(b"\x89PNG\r\n\x1a\n same bytes")
    (tmp_path / "ref2.png").write_bytes(b"\x89PNG\r\n\x1a\n same bytes")
    (tmp_path / "m.yaml").write_text(
        HEAD
        + "jobs:\n"
        + "  - {key: a, prompt: p, inputs: [{path: one/ref.png}]}\n"
        + "  - {key: b, prompt: p, output: 'x/{key}.png', inputs: [{path: ref2.png}]}\n"
    )
    a, b = load_manifest(tmp_path / "m.yaml").jobs
    assert a.body["inputs"] == b.body["inputs"] == [{"sha256": a.inputs[0]["sha256"]}]
    assert a.inputs[0]["path"] == str((tmp_path / "one" / "ref.png").resolve())


def test_every_dependency_problem_is_listed_at_once(tmp_path):
    (tmp_path / "m.yaml").write_text(
        HEAD
        + "jobs:\n"
        + "  - {key: a, prompt: p, needs: [zz, other/x]}\n"
        + "  - {key: b, prompt: p, inputs: [{path: nope.png}]}\n"
    )
    with pytest.raises(ManifestError) as caught:
        load_manifest(tmp_path / "m.yaml")
    problems = "\n".join(caught.value.problems)
    assert "job 0 (key 'a'): field 'needs[0]': unknown key 'zz'" in problems
    assert "job 0 (key 'a'): field 'needs[1]': 'other/x' is a job of another batch" in problems
    assert "job 1 (key 'b'): field 'inputs[0].path': no such file" in problems


def test_an_input_that_is_not_an_image_is_refused_before_anything_is_sent(afc):
    """Found by an outside audit: a text file named as a reference image was posted to
    OpenAI's edits endpoint as ``image[]`` (a paid API), the job failing with a 400."""
    from conftest import manifest

    (afc.cwd / "creds.txt").write_text("not a picture")
    (afc.cwd / "ref.png").write_bytes(b"PK\x03\x04 a zip named .png")
    data = manifest(
        [
            {"key": "a", "prompt": "p", "inputs": [{"path": "creds.txt"}]},
            {"key": "b", "prompt": "p", "inputs": [{"path": "ref.png"}]},
        ]
    )
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 2, result.stderr
    assert "job 0 (key 'a'): field 'inputs[0].path'" in result.stderr
    assert "is not a PNG, JPEG, WebP, GIF, HEIC/HEIF, AVIF, TIFF or BMP image" in result.stderr
    assert "job 1 (key 'b')" in result.stderr
    assert not (afc.cwd / "afc.db").exists()


def test_image_kinds_are_told_by_their_first_bytes():
    from afc_cli.inputs import image_type

    assert image_type(b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00") == "image/heic"
    assert image_type(b"\x00\x00\x00\x1cftypavif\x00\x00\x00\x00") == "image/avif"
    assert image_type(b"\x00\x00\x00\x18ftypisom\x00\x00\x00\x00") is None  # an MP4
    assert image_type(b"II*\x00\x08\x00\x00\x00") == "image/tiff"
    bmp = b"BM" + (70).to_bytes(4, "little") + bytes(4) + (54).to_bytes(4, "little")
    assert image_type(bmp + (40).to_bytes(4, "little") + bytes(16)) == "image/bmp"
    assert image_type(b"BMW owners' notes about the car, 2026") is None
    assert image_type(b"PK\x03\x04") is None


def test_every_cycle_is_listed_with_its_jobs_indexes(tmp_path):
    """Found by an outside audit: with two cycles only the first was reported, by key alone."""
    (tmp_path / "m.yaml").write_text(
        HEAD
        + "jobs:\n"
        + "  - {key: a, prompt: p, needs: [b]}\n"
        + "  - {key: b, prompt: p, needs: [a]}\n"
        + "  - {key: c, prompt: p, needs: [d]}\n"
        + "  - {key: d, prompt: p, needs: [c]}\n"
        + "  - {key: e, prompt: p, needs: [e]}\n"
        + "  - {key: f, prompt: p, needs: [a]}\n"
    )
    with pytest.raises(ManifestError) as caught:
        load_manifest(tmp_path / "m.yaml")
    cycles = [p for p in caught.value.problems if "(a cycle)" in p]
    assert len(cycles) == 3, cycles
    text = "\n".join(cycles)
    for key, index in (("a", 0), ("b", 1), ("c", 2), ("d", 3), ("e", 4)):
        assert f"'{key}' (job {index})" in text
    assert "'f'" not in text  # waits on a cycle, but is not in one
