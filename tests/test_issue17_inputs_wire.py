"""Reference images on the wire (issue 17): each adapter sends a manifest's ``inputs`` in its
provider's own format, checked by the fake server that speaks it (tests/fakeproviders.py):
OpenAI image edits as multipart ``image[]`` parts, Replicate's model input fields and fal's
``image_url``/``image_urls`` as data URIs, Gemini as ``inline_data`` parts."""

from __future__ import annotations

import hashlib

import pytest
from conftest import manifest
from test_providers import FAST, MODELS, RATES

from afc_cli.providers.local import render_png

PNG = "image/png"


def submit(afc, provider, inputs, params=None):
    (afc.cwd / "ref.png").write_bytes(render_png("a reference", 24, 24))
    shot = {
        "key": "shot",
        "prompt": f"the shot on {provider}",
        "inputs": inputs,
        "chain": [{"provider": provider, "model": MODELS[provider], "backoff": FAST}],
    }
    if params:
        shot["params"] = params
    afc.write_manifest(manifest([{"key": "style", "prompt": "the style frame"}, shot], rates=RATES))
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    style = hashlib.sha256((afc.outputs() / "b1" / "style.png").read_bytes()).hexdigest()
    ref = hashlib.sha256((afc.cwd / "ref.png").read_bytes()).hexdigest()
    return style, ref


BOTH = [{"job": "style"}, {"path": "ref.png"}]


@pytest.mark.parametrize(
    "provider, inputs, params, fields",
    [
        ("openai", [{"job": "style"}], None, ["image[]"]),
        ("openai", BOTH, None, ["image[]", "image[]"]),
        ("replicate", [{"job": "style"}], None, ["image"]),
        ("replicate", BOTH, None, ["image_input", "image_input"]),
        ("replicate", [{"job": "style"}], {"inputs_field": "input_image"}, ["input_image"]),
        ("fal", [{"job": "style"}], None, ["image_url"]),
        ("fal", BOTH, None, ["image_urls", "image_urls"]),
        ("gemini", [{"job": "style"}], None, ["inline_data"]),
        ("gemini", BOTH, None, ["inline_data", "inline_data"]),
    ],
)
def test_each_adapter_sends_inputs_in_its_providers_wire_format(
    afc, fake, provider, inputs, params, fields
):
    style, ref = submit(afc, provider, inputs, params)
    digests = {"job": style, "path": ref}
    expected = [
        (field, PNG, digests[next(iter(item))]) for field, item in zip(fields, inputs, strict=True)
    ]
    assert fake.inputs[f"the shot on {provider}"] == expected
    if provider == "replicate":
        sent = next(iter(fake.predictions.values()))["input"]
        assert "inputs_field" not in sent, "afc's own param is never sent to the model"
    # what was sent is recorded on the attempt, with the same digests
    attempt = afc.json("show", "shot")["attempts"][-1]
    assert [i["sha256"] for i in attempt["inputs"]] == [e[2] for e in expected]


def test_without_inputs_openai_still_generates(afc, fake):
    afc.write_manifest(
        manifest(
            [
                {
                    "key": "plain",
                    "prompt": "no reference",
                    "chain": [{"provider": "openai", "model": MODELS["openai"]}],
                }
            ],
            rates=RATES,
        )
    )
    assert afc("submit", "manifest.yaml").returncode == 0
    assert fake.counts["openai"] == 1 and fake.counts["openai_edits"] == 0


@pytest.mark.parametrize("provider", ["replicate", "fal"])
def test_a_request_a_killed_run_left_is_polled_though_its_input_file_changed_since(
    afc, fake, provider
):
    """Found by an outside audit: the resuming run read (and checked) the job's inputs before
    it looked for a request left at the provider, so an input file touched after the paid
    submit failed the job without polling it, and 'afc retry' then paid for a second render.
    A poll sends no input: the request is polled and its render kept."""
    import signal

    from conftest import wait_for

    (afc.cwd / "ref.png").write_bytes(render_png("a reference", 24, 24))
    shot = {"key": "shot", "prompt": "hold the shot", "inputs": [{"path": "ref.png"}]}
    shot["chain"] = [{"provider": provider, "model": MODELS[provider], "backoff": FAST}]
    afc.write_manifest(manifest([shot], rates=RATES))
    run = afc.popen("submit", "manifest.yaml")
    wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE provider_request_id IS NOT NULL", 1)
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    (afc.cwd / "ref.png").write_bytes((afc.cwd / "ref.png").read_bytes() + b"\0")
    fake.released.set()
    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert fake.counts[f"{provider}_submit"] == 1, "the request already paid for was abandoned"
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert afc.rows("SELECT status FROM attempts") == [("succeeded",)]
