"""Outside audit 63b: a job's ``inputs`` had no bound on their number. Each reference image
is read whole into memory when the job's request is made (and base64-encoded for Replicate,
fal and Gemini): one job with 20 inputs of a 40 MiB file held 870 MB on the local provider,
and a few KB of manifest naming a file hundreds of times (a list generated wrong) held more
than the host has, for a request no provider takes (OpenAI's image edits take up to 16
images, the most of any). More than 16 are refused now, exit 2, nothing written, in the
manifest and in a job list alike."""

from __future__ import annotations

import json

from conftest import manifest

PNG = b"\x89PNG\r\n\x1a\n" + bytes(64)


def test_more_reference_images_than_a_provider_takes_are_refused(afc):
    (afc.cwd / "ref.png").write_bytes(PNG)
    many = [{"path": "ref.png"}] * 17
    afc.write_manifest(
        manifest(
            [
                {"key": "a", "prompt": "p", "inputs": many},
                {"key": "b", "prompt": "p", "inputs": [{"job": "c"}] * 300},
                {"key": "c", "prompt": "p"},
            ]
        )
    )
    result = afc("submit", "manifest.yaml", "--no-run")
    said = result.stderr
    assert result.returncode == 2, said
    assert (
        "job 0 (key 'a'): field 'inputs': at most 16 reference images a job, got 17: no "
        "provider takes more"
    ) in said, said
    assert "job 1 (key 'b'): field 'inputs': at most 16 reference images a job, got 300" in said
    assert not (afc.cwd / "afc.db").exists()


def test_in_the_defaults_and_in_a_job_list_too(afc):
    (afc.cwd / "ref.png").write_bytes(PNG)
    data = manifest([{"key": "a", "prompt": "p"}])
    data["defaults"]["inputs"] = [{"path": "ref.png"}] * 20
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml", "--no-run")
    said = result.stderr
    assert result.returncode == 2, said
    assert "field 'defaults.inputs': at most 16 reference images a job, got 20" in said, said
    assert not (afc.cwd / "afc.db").exists()

    data = manifest([])
    del data["jobs"]
    data["jobs_from"] = "jobs.jsonl"
    line = {"key": "x", "prompt": "p", "inputs": [{"path": "ref.png"}] * 18}
    (afc.cwd / "jobs.jsonl").write_text(json.dumps(line) + "\n")
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml", "--no-run")
    said = result.stderr
    assert result.returncode == 2, said
    assert "jobs.jsonl line 1 (key 'x'): field 'inputs': at most 16" in said, said
    assert not (afc.cwd / "afc.db").exists()


def test_sixteen_are_sent_as_before(afc):
    (afc.cwd / "ref.png").write_bytes(PNG)
    afc.write_manifest(
        manifest([{"key": "a", "prompt": "p", "inputs": [{"path": "ref.png"}] * 16}])
    )
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    [attempt] = afc.json("show", "a")["attempts"]
    assert len(attempt["inputs"]) == 16
