"""Reference images sent to fal under the field the model names (outside audit 30a), through
the real ``afc`` command against the fake fal queue (tests/fakeproviders.py).

fal's models name their reference field themselves: ``fal-ai/flux-kontext`` takes one image
in ``image_url``, ``fal-ai/nano-banana/edit`` and ``fal-ai/bytedance/seedream/v4/edit`` a
list in ``image_urls`` (one image too), others ``input_image_urls`` or
``reference_image_url``. afc sent one reference as ``image_url`` and several as
``image_urls`` whatever the model, and passed ``inputs_field`` (the param README gives to
name the field) on to fal as a model input: a job with one reference image for an
``image_urls`` model was refused at every attempt, and a model whose reference field is
optional under another name dropped the reference and was paid for a render made without
it. ``inputs_field`` names the field on fal as on Replicate, and is never sent."""

from __future__ import annotations

import hashlib

import pytest
from conftest import manifest
from test_providers import FAST, MODELS, RATES

from afc_cli.providers.local import render_png

PNG = "image/png"


def _submit(afc, inputs, params):
    (afc.cwd / "ref.png").write_bytes(render_png("a reference", 24, 24))
    shot = {
        "key": "shot",
        "prompt": "the shot on fal",
        "inputs": inputs,
        "params": params,
        "chain": [{"provider": "fal", "model": MODELS["fal"], "backoff": FAST}],
    }
    afc.write_manifest(manifest([{"key": "style", "prompt": "the style frame"}, shot], rates=RATES))
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    style = hashlib.sha256((afc.outputs() / "b1" / "style.png").read_bytes()).hexdigest()
    ref = hashlib.sha256((afc.cwd / "ref.png").read_bytes()).hexdigest()
    return {"job": style, "path": ref}


@pytest.mark.parametrize(
    "inputs, field, listed",
    [
        ([{"job": "style"}], "image_urls", True),  # one image, a list field (nano-banana/edit)
        ([{"job": "style"}], "reference_image_url", False),  # one image, a field of one
        ([{"job": "style"}, {"path": "ref.png"}], "input_image_urls", True),
    ],
)
def test_fal_sends_the_references_in_the_field_inputs_field_names(afc, fake, inputs, field, listed):
    digests = _submit(afc, inputs, {"inputs_field": field})
    sent = next(iter(fake.fal.values()))["input"]
    assert "inputs_field" not in sent, "afc's own param is never sent to the model"
    assert not ({"image_url", "image_urls"} - {field}) & set(sent), "nor under another name"
    assert isinstance(sent[field], list) is listed
    assert fake.inputs["the shot on fal"] == [
        (field, PNG, digests[next(iter(item))]) for item in inputs
    ]
    assert fake.counts["fal_submit"] == 1  # the shot's (the style frame renders locally)
    attempt = afc.json("show", "shot")["attempts"][-1]
    assert attempt["status"] == "succeeded"
    assert [i["sha256"] for i in attempt["inputs"]] == [digests[next(iter(i))] for i in inputs]


def test_a_fal_inputs_field_that_is_no_field_name_is_a_manifest_error(afc, fake):
    (afc.cwd / "ref.png").write_bytes(render_png("a reference", 24, 24))
    shot = {
        "key": "shot",
        "prompt": "the shot on fal",
        "inputs": [{"path": "ref.png"}],
        "params": {"inputs_field": ["image_urls"]},
        "chain": [{"provider": "fal", "model": MODELS["fal"]}],
    }
    afc.write_manifest(manifest([shot], rates=RATES))
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 2, result.stderr
    assert "inputs_field" in result.stderr
    assert fake.counts["fal_submit"] == 0


def test_a_submits_json_says_what_its_gated_jobs_wait_for_as_afc_status_does(afc):
    """``afc submit --json`` and ``afc resume --json`` print "the same job list" as ``afc
    status --json`` (README), but their ``waiting`` was null for a job awaiting review or
    blocked behind one, where ``afc status --json`` (and the human summary) said what it
    waits for: a script reading the submit's JSON could not tell a paused job's cause."""
    from conftest import manifest

    jobs = [
        {"key": "frame", "prompt": "the style frame", "review": True},
        {"key": "shot", "prompt": "a shot", "inputs": [{"job": "frame"}]},
    ]
    afc.write_manifest(manifest(jobs))
    submitted = afc.json("submit", "manifest.yaml")
    status = afc.json("status")
    said = {job["key"]: job["waiting"] for job in status["jobs"]}
    assert said["frame"] and "afc review approve frame" in said["frame"]
    assert said["shot"] == "waiting for 1 need: frame"
    assert {job["key"]: job["waiting"] for job in submitted["jobs"]} == said
    resumed = afc.json("resume")
    assert {job["key"]: job["waiting"] for job in resumed["jobs"]} == {"shot": said["shot"]}
