"""Outside audit 30k: the OpenAI Images adapter, as a user with reference images (edits) and
a gateway answering with URLs meets it. Each test names what a user met."""

from __future__ import annotations

from conftest import manifest
from test_providers import FAST, MODELS, RATES

from afc_cli.providers.local import render_png


def _edit_job(afc, params, key="shot"):
    (afc.cwd / "face.png").write_bytes(render_png("a face to keep", 24, 24))
    return {
        "key": key,
        "prompt": "the portrait, restyled",
        "inputs": [{"path": "face.png"}],
        "params": params,
        "chain": [{"provider": "openai", "model": MODELS["openai"], "backoff": FAST}],
    }


def test_input_fidelity_and_output_compression_reach_openai_and_are_hashed(afc, fake):
    """A user editing a face with gpt-image-1 wrote ``input_fidelity: high`` (OpenAI's edits
    parameter for keeping a reference's features) and ``output_compression: 80`` (a
    parameter of both image endpoints, for jpeg and webp), and afc refused the manifest:
    "not a parameter of openai". Both are sent as given, and a changed value is a changed
    request."""
    params = {"input_fidelity": "high", "output_compression": 80, "output_format": "jpeg"}
    afc.write_manifest(manifest([_edit_job(afc, params)], rates=RATES))
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    [fields] = fake.openai_edit_fields
    assert fields["input_fidelity"] == "high"
    assert fields["output_compression"] == "80"
    assert fields["output_format"] == "jpeg"
    # a generation without references takes output_compression too (JSON, as given)
    plain = {
        "key": "plain",
        "prompt": "a plain generation",
        "params": {"output_compression": 50, "output_format": "webp"},
        "chain": [{"provider": "openai", "model": MODELS["openai"], "backoff": FAST}],
    }
    afc.write_manifest(manifest([plain], rates=RATES, batch="b2"))
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    assert fake.openai_bodies[-1]["output_compression"] == 50
    # part of the request: the same key with another fidelity is a conflict, nothing sent
    params["input_fidelity"] = "low"
    afc.write_manifest(manifest([_edit_job(afc, params)], rates=RATES))
    changed = afc("submit", "manifest.yaml")
    assert changed.returncode == 3, changed.stderr
    assert "IDEMPOTENCY_CONFLICT" in changed.stderr
    assert len(fake.openai_edit_fields) == 1
