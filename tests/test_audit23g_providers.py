"""Outside audit 23g: the provider adapters at the wire (README "Providers"), through the real
``afc`` command against the fake providers (tests/fakeproviders.py), extended here where a
wire behaviour was missing."""

from __future__ import annotations

import hashlib

from conftest import manifest
from fakeproviders import render_png
from test_providers import FAST, MODELS, RATES


def run(afc, provider, prompt, attempts=2, params=None):
    job = {"key": "shot", "prompt": prompt}
    if params:
        job["params"] = params
    data = manifest([job], rates=RATES)
    data["defaults"]["chain"] = [
        {"provider": provider, "model": MODELS[provider], "attempts": attempts, "backoff": FAST}
    ]
    afc.write_manifest(data)
    return afc("submit", "manifest.yaml", "--json")


def test_a_fal_image_its_safety_checker_flagged_is_a_refusal_not_a_stored_output(afc, fake):
    """fal's safety checker (on by default for its image models) answers a flagged image as a
    black one and says so in ``has_nsfw_concepts``. afc read only ``images``: the black image
    was stored as the job's output, the job succeeded, and nothing said the render was
    refused. It is a refusal (README "One job's pipeline"), paid: the render was made and billed."""
    result = run(afc, "fal", "checker-flags a scene")
    assert result.returncode != 0, result.stdout
    shown = afc.json("show", "shot")
    assert shown["job"]["status"] == "failed", shown["job"]
    assert afc.json("outputs")["outputs"] == []  # no black image stored as the output
    attempts = shown["attempts"]
    assert [a["error_class"] for a in attempts] == ["refusal", "refusal"], attempts
    assert all(a["cost"] == "0.025000" for a in attempts), attempts  # made and billed


def test_a_fal_result_with_one_image_flagged_keeps_an_unflagged_one(afc, fake):
    """Of several images, the first flagged and the second not: the job keeps one that was
    not blacked out, and every image made is priced."""
    result = run(afc, "fal", "checker-first a scene", params={"num_images": 2})
    assert result.returncode == 0, result.stderr
    shown = afc.json("show", "shot")
    assert shown["job"]["status"] == "succeeded"
    (attempt,) = shown["attempts"]
    assert attempt["cost"] == "0.050000", attempt
    # the second image (not flagged) is the one stored, not the blacked-out first
    request_id = attempt["provider_request_id"]
    unflagged = hashlib.sha256(render_png(f"/files/{request_id}-1.png", 32, 32)).hexdigest()
    (output,) = afc.json("outputs")["outputs"]
    assert output["sha256"] == unflagged, output


def test_a_replicate_model_whose_safety_checker_filtered_every_image_is_a_refusal(afc, fake):
    """Replicate's flux and SDXL models run a safety checker of their own (on unless
    ``disable_safety_checker``): a prediction whose every image it filtered out ends
    ``failed`` with "All generated images contained NSFW content..." (or "Generated image
    contained NSFW content..."), not Replicate's E005. afc called it ``server``: a chain
    written to leave such a model on a refusal (``fallback_on: [refusal]``) never did, and the
    job failed 'server' with a fallback model waiting unused."""
    data = manifest([{"key": "shot", "prompt": "checker-fails a scene"}], rates=RATES)
    data["defaults"]["chain"] = [
        {
            "provider": "replicate",
            "model": MODELS["replicate"],
            "attempts": 1,
            "backoff": FAST,
            "fallback_on": ["refusal"],
        },
        {"provider": "fal", "model": MODELS["fal"], "attempts": 1, "backoff": FAST},
    ]
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml", "--json")
    assert result.returncode == 0, result.stderr
    shown = afc.json("show", "shot")
    assert shown["job"]["status"] == "succeeded", shown["job"]
    first, second = shown["attempts"]
    assert (first["provider"], first["error_class"]) == ("replicate", "refusal"), first
    assert first["cost"] is not None  # it ran: its seconds priced by the card
    assert second["provider"] == "fal" and second["status"] == "succeeded"


def test_an_openai_input_error_under_the_image_user_error_type_is_invalid_not_a_refusal(afc, fake):
    """gpt-image answers a reference image it cannot read with 400 ``type:
    image_generation_user_error``, ``code: invalid_image_file`` (the type its moderation
    blocks share, with ``code: moderation_blocked``). afc took the type alone for a refusal:
    the same unreadable image was sent again for each of the model's attempts, each recorded
    as possibly paid (a refusal's cost is unknown), the job failed 'refusal', and a chain
    allowing fallback on refusal sent it on. An input error is ``invalid`` (README "One job's pipeline":
    the chain stops), refused before anything was made: a known cost of 0."""
    from afc_cli.providers.local import render_png

    (afc.cwd / "ref.png").write_bytes(render_png("a reference", 16, 16))
    job = {"key": "shot", "prompt": "unreadable-image", "inputs": [{"path": "ref.png"}]}
    data = manifest([job], rates=RATES)
    data["defaults"]["chain"] = [
        {"provider": "openai", "model": MODELS["openai"], "attempts": 3, "backoff": FAST}
    ]
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml", "--json")
    assert result.returncode != 0, result.stdout
    (attempt,) = afc.json("show", "shot")["attempts"]  # not sent again
    assert (attempt["error_class"], attempt["http_status"]) == ("invalid", 400), attempt
    assert attempt["cost"] == "0.000000", attempt
    assert fake.counts["openai_edits"] == 1


def test_a_fal_result_whose_first_image_has_no_url_keeps_one_that_has(afc, fake):
    """Of several images, the first named without a URL and the second at one: afc read the
    first alone and failed the attempt 'completed without an image', its cost unknown though
    fal billed both images, and the next attempt paid for them again (outside audit 52a's
    suspicion). The image at a URL is kept, and both are priced."""
    result = run(afc, "fal", "first-no-url a scene", params={"num_images": 2})
    assert result.returncode == 0, result.stderr
    shown = afc.json("show", "shot")
    (attempt,) = shown["attempts"]
    assert attempt["status"] == "succeeded" and attempt["cost"] == "0.050000", attempt
    request_id = attempt["provider_request_id"]
    second = hashlib.sha256(render_png(f"/files/{request_id}-1.png", 32, 32)).hexdigest()
    (output,) = afc.json("outputs")["outputs"]
    assert output["sha256"] == second, output
