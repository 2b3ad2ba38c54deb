"""Outside audit 30k: the OpenAI Images adapter, as a user with reference images (edits) and
a gateway answering with URLs meets it. Each test names what a user met."""

from __future__ import annotations

import pytest
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
        # input_fidelity in a batch's defaults reaches a job without references too: it is
        # an edits parameter that generations refuse (400), so it is left out of the body
        "params": {"output_compression": 50, "output_format": "webp", "input_fidelity": "high"},
        "chain": [{"provider": "openai", "model": MODELS["openai"], "backoff": FAST}],
    }
    afc.write_manifest(manifest([plain], rates=RATES, batch="b2"))
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    assert fake.openai_bodies[-1]["output_compression"] == 50
    assert "input_fidelity" not in fake.openai_bodies[-1]
    # part of the request: the same key with another fidelity is a conflict, nothing sent
    params["input_fidelity"] = "low"
    afc.write_manifest(manifest([_edit_job(afc, params)], rates=RATES))
    changed = afc("submit", "manifest.yaml")
    assert changed.returncode == 3, changed.stderr
    assert "IDEMPOTENCY_CONFLICT" in changed.stderr
    assert len(fake.openai_edit_fields) == 1


def test_a_tokens_per_minute_429_waits_for_the_tokens_reset(afc, fake):
    """gpt-image-1's limits count tokens as well as requests (each high square image is 4,160
    output tokens). OpenAI's 429 for the tokens' limit (``type: tokens``) names its reset in
    ``x-ratelimit-reset-tokens``; afc read ``x-ratelimit-reset-requests`` only, a few ms
    away while the requests' limit has room, so the retry came within the jitter, hit the
    same limit, and a batch at its token rate spent its attempts and failed ``exhausted``."""
    shot = {"key": "shot", "prompt": "token-limit shot"}
    shot["chain"] = [{"provider": "openai", "model": MODELS["openai"], "backoff": FAST}]
    afc.write_manifest(manifest([shot], rates=RATES))
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    first, second = afc.json("show", "shot")["attempts"]
    assert (first["error_class"], second["status"]) == ("rate_limited", "succeeded")
    assert afc.rows("SELECT retry_after_s FROM attempts WHERE status = 'failed'") == [(3.24,)]
    # the tokens' reset, capped by the chain's backoff (FAST: 0.05 s), not a jitter below it
    assert second["waited_s"] == pytest.approx(0.05)


@pytest.mark.parametrize("prompt", ["billing-inactive shot", "hard-limit shot"])
def test_an_account_out_of_billing_stops_the_chain_as_insufficient_quota_does(afc, fake, prompt):
    """OpenAI answers an account whose billing is not active with a 429 coded
    ``billing_not_active``, and one past its spending limit with a 400 coded
    ``billing_hard_limit_reached``. afc read the first as a rate limit (each job called
    again after its backoff, then 'exhausted', and a chain with ``fallback_on: [exhausted]``
    went on to the next OpenAI model on the same account) and the second as the user's
    invalid input. Both are money, as ``insufficient_quota`` is: ``auth``, one call, cost 0."""
    shot = {"key": "shot", "prompt": prompt}
    shot["chain"] = [
        {"provider": "openai", "model": MODELS["openai"], "backoff": FAST},
        {"provider": "openai", "model": "dall-e-3", "backoff": FAST},
    ]
    shot["chain"][0]["fallback_on"] = ["exhausted"]
    afc.write_manifest(manifest([shot], rates=RATES))
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 1, result.stderr
    [attempt] = afc.json("show", "shot")["attempts"]
    assert (attempt["error_class"], attempt["cost"]) == ("auth", "0.000000")
    assert fake.counts["openai"] == 1


def test_a_dall_e_2_edit_sends_its_reference_as_the_one_image_file_it_takes(afc, fake):
    """dall-e-2 edits one image, sent as the form's ``image`` file (OpenAI's SDK sends one
    file so); afc sent every reference as an ``image[]`` part, gpt-image's shape for several,
    which dall-e-2 refuses ("Invalid type for 'image': expected a file, but got an array
    instead."), so no dall-e-2 edit could ever be made."""
    job = _edit_job(afc, {"size": "256x256"})
    job["chain"] = [{"provider": "openai", "model": "dall-e-2", "backoff": FAST}]
    afc.write_manifest(
        manifest([job], rates=[{"provider": "openai", "model": "dall-e-2", "per_image": "0.016"}])
    )
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    [(field, media, _)] = fake.inputs["the portrait, restyled"]
    assert (field, media) == ("image", "image/png")
    [attempt] = afc.json("show", "shot")["attempts"]
    assert (attempt["status"], attempt["cost"]) == ("succeeded", "0.016000")
    assert fake.openai_edit_fields[0]["response_format"] == "b64_json"


@pytest.mark.parametrize("prompt", ["safety-nocode shot", "safety-gateway shot"])
def test_a_safety_rejection_without_its_code_is_a_refusal_that_falls_back(afc, fake, prompt):
    """OpenAI's safety system rejects a DALL-E prompt with a 400 whose message says so ("Your
    request was rejected as a result of our safety system."), which came with ``code: null``,
    and a gateway in front passes it on as ``{"message": ...}`` with no ``error`` wrapper.
    afc classed both ``invalid`` (the first a user input error, the second 'openai: HTTP 400',
    the reason lost): the chain stopped, and ``fallback_on: [refusal]`` never sent the job
    to the model meant for what OpenAI refuses."""
    shot = {"key": "shot", "prompt": prompt}
    shot["chain"] = [
        {"provider": "openai", "model": MODELS["openai"], "attempts": 1, "backoff": FAST},
        {"provider": "local", "model": "m1", "backoff": FAST},
    ]
    shot["chain"][0]["fallback_on"] = ["refusal"]
    rates = [*RATES, {"provider": "local", "model": "m1", "per_image": "0.05"}]
    afc.write_manifest(manifest([shot], rates=rates))
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    first, second = afc.json("show", "shot")["attempts"]
    assert (first["error_class"], first["http_status"]) == ("refusal", 400)
    assert "safety system" in first["error"]
    assert (second["provider"], second["status"]) == ("local", "succeeded")


def test_writing_out_openai_s_n_1_is_the_same_request(afc, fake):
    """The OpenAI adapter sends ``n: 1`` itself when a job leaves ``n`` out, so a manifest
    that writes ``n: 1`` out asks for the same call; README (Defaults and the hash) says such
    a param never changes the hash. It did: a re-submit with ``n: 1`` added to the defaults
    refused every job as an IDEMPOTENCY_CONFLICT (exit 3)."""
    shot = {"key": "shot", "prompt": "one image"}
    shot["chain"] = [{"provider": "openai", "model": MODELS["openai"], "backoff": FAST}]
    afc.write_manifest(manifest([shot], rates=RATES))
    assert afc("submit", "manifest.yaml").returncode == 0
    data = manifest([shot], rates=RATES)
    data["defaults"]["params"] = {"n": 1}
    afc.write_manifest(data)
    again = afc("submit", "manifest.yaml")
    assert again.returncode == 0, again.stderr
    assert "1 replayed" in again.stderr
    assert fake.counts["openai"] == 1
    # and a batch first admitted with n: 1 written out replays without it
    data["batch"] = "b2"
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    afc.write_manifest(manifest([shot], rates=RATES, batch="b2"))
    back = afc("submit", "manifest.yaml")
    assert back.returncode == 0, back.stderr
    assert fake.counts["openai"] == 2
