"""Paths of the provider adapters that no test executed (outside audit 52a measured the
provider and storage tests' line and branch coverage), each reachable by what a real provider
answers or a manifest asks, and each where a defect pays twice or records a wrong cost. Through
the wire: the fake servers of tests/fakeproviders.py, afc run as a child process."""

from __future__ import annotations

import json

import pytest
from conftest import manifest
from test_cancel_completed import _killed_while_rendering
from test_providers import FAST, MODELS, RATES

VERSION = "5599ed30703defd1d160a25a63321b4dec97101d98b4674bcc56e41f62f35637"
VERSIONED = f"{MODELS['replicate']}:{VERSION}"


def test_a_replicate_model_version_is_created_by_its_version_and_priced(afc, fake):
    """``owner/name:version`` (a model pinned to one version) is created with ``POST
    /predictions`` and ``{"version": HASH, "input": ...}``, polled and stored, priced by the
    card of that model string. Would catch a versioned model sent to ``/models/{model}/
    predictions`` (Replicate answers 404 for such a model name: every job failed ``invalid``
    before any render) or its version sent whole or not at all."""
    rates = [*RATES, {"provider": "replicate", "model": VERSIONED, "per_second": "0.0012"}]
    chain = [{"provider": "replicate", "model": VERSIONED, "backoff": FAST}]
    data = manifest([{"key": "shot", "prompt": "a pinned model"}], rates=rates)
    data["defaults"]["chain"] = chain
    afc.write_manifest(data)
    out = afc.json("submit", "manifest.yaml")
    assert out["counts"] == {"succeeded": 1}, out
    [prediction] = fake.predictions.values()
    assert prediction["version"] == VERSION
    assert prediction["input"]["prompt"] == "a pinned model"
    [attempt] = afc.json("show", "shot")["attempts"]
    assert attempt["cost"] == "0.003840", attempt  # 3.2 s at 0.0012/s
    assert (afc.outputs() / "b1" / "shot.png").read_bytes().startswith(b"\x89PNG")


def test_a_fal_request_refused_by_its_safety_check_as_it_ran_is_a_refusal(afc, fake):
    """fal ends a queued request its model's safety check refused COMPLETED with ``error_type:
    content_policy_violation``: a refusal at a cost unknown (the request ran), which leaves
    the model without falling back to the next (``fallback_on`` names no ``refusal``: the
    same prompt is refused there too). Would catch it read as a passing ``server`` failure:
    the model's attempts spent with backoff waits, then the chain's next model (here
    OpenAI) paid for the refused prompt."""
    chain = [
        {"provider": "fal", "model": MODELS["fal"], "attempts": 1, "backoff": FAST},
        {"provider": "openai", "model": MODELS["openai"], "backoff": FAST},
    ]
    data = manifest([{"key": "shot", "prompt": "flagged-at-end shot"}], rates=RATES)
    data["defaults"]["chain"] = chain
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml", "--json")
    assert result.returncode != 0, result.stdout
    assert fake.counts["fal_submit"] == 1
    assert fake.counts["openai"] == 0, "the refused prompt was paid for at the next model"
    [attempt] = afc.json("show", "shot", expect=None)["attempts"]
    assert attempt["error_class"] == "refusal", attempt
    assert attempt["cost"] is None, attempt


def test_a_fal_request_cancelled_after_it_completed_and_its_result_went_is_priced(afc, fake):
    """'afc cancel' of a job whose run died while fal rendered: fal says the request had
    completed (ALREADY_COMPLETED), and its result was already deleted (404; fal keeps a large
    one minutes). Its status says it completed without an error, so it made (and fal billed)
    the images its request asked for: the attempt is priced by them (2 x 0.025), not left
    'unknown outcome, possibly paid'. Would catch a result's 404 read as nothing to price
    (``FalProvider.completed_usage``), or the images counted as one."""
    chain = [{"provider": "fal", "model": MODELS["fal"], "backoff": FAST}]
    job = {
        "key": "shot",
        "prompt": "done-at-cancel result-gone shot",
        "params": {"num_images": 2},
        "chain": chain,
    }
    afc.write_manifest(manifest([job], rates=RATES))
    request = _killed_while_rendering(afc)[0]
    cancelled = afc("cancel", "shot", "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    out = json.loads(cancelled.stdout)
    assert out["completed_at_provider"] == [
        {"key": "shot", "batch": "b1", "provider": "fal", "request": request}
    ]
    [left] = afc.json("show", "shot")["attempts"]
    assert left["cost"] == "0.050000", left
    assert left["usage"] == {"images": 2}, left


def test_a_gemini_aspect_ratio_reaches_the_request(afc, fake):
    """``params.aspect_ratio`` goes to Gemini as ``generationConfig.imageConfig.aspectRatio``
    beside the image modality. Would catch it dropped or misnamed: every render paid for at
    Gemini's default square, not the frame asked for, and nothing said."""
    data = manifest(
        [{"key": "wide", "prompt": "a wide shot", "params": {"aspect_ratio": "16:9"}}],
        rates=RATES,
    )
    data["defaults"]["chain"] = [{"provider": "gemini", "model": MODELS["gemini"], "backoff": FAST}]
    afc.write_manifest(data)
    out = afc.json("submit", "manifest.yaml")
    assert out["counts"] == {"succeeded": 1}, out
    assert fake.gemini_configs["a wide shot"] == {
        "responseModalities": ["IMAGE"],
        "imageConfig": {"aspectRatio": "16:9"},
    }


@pytest.mark.parametrize("provider", ["fal", "replicate"])
def test_a_submit_whose_answer_never_came_is_possibly_paid_not_free(afc, fake, provider):
    """The provider queued the request (it runs, and is billed), and the connection dropped
    before its answer (the request's id) came: the attempt is recorded at a cost unknown,
    counted by the costs report as possibly paid, and the next attempt renders the job.
    Would catch the dropped submit recorded as a request never sent (a known 0): the budget
    and every report short of what the provider bills."""
    chain = [{"provider": provider, "model": MODELS[provider], "attempts": 3, "backoff": FAST}]
    data = manifest([{"key": "shot", "prompt": "submit-drop shot"}], rates=RATES)
    data["defaults"]["chain"] = chain
    afc.write_manifest(data)
    out = afc.json("submit", "manifest.yaml")
    assert out["counts"] == {"succeeded": 1}, out
    first, second = afc.json("show", "shot")["attempts"]
    assert first["error_class"] == "unavailable", first
    assert first["cost"] is None and first["cost_source"] is None, first
    assert second["status"] == "succeeded", second
    report = afc.json("costs", "report")
    assert [row["unpriced_attempts"] for row in report["rows"]] == [1], report


@pytest.mark.parametrize("provider", ["replicate", "fal"])
def test_afc_cancel_that_cannot_reach_the_provider_says_the_request_may_render_on(
    afc, fake, provider
):
    """'afc cancel' of a job whose run died while its request rendered, the provider out of
    reach (its cancel gets no answer): the job is cancelled, and the request is named as not
    stopped, with why, so a person knows it may still render and be billed. Would catch a
    cancel that got no answer taken for a request stopped (the render billed with nothing
    said), or one that stopped 'afc cancel' itself."""
    chain = [{"provider": provider, "model": MODELS[provider], "backoff": FAST}]
    afc.write_manifest(manifest([{"key": "shot", "prompt": "hold shot", "chain": chain}]))
    request = _killed_while_rendering(afc)[0]
    fake.stop()  # the provider out of reach: nothing listens at its port
    fake.server.server_close()
    cancelled = afc("cancel", "shot", "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    out = json.loads(cancelled.stdout)
    assert out["cancelled"] == [{"key": "shot", "batch": "b1"}], out
    assert out["stopped_at_provider"] == [] and out["completed_at_provider"] == [], out
    [left] = out["not_stopped_at_provider"]
    assert (left["key"], left["provider"], left["request"]) == ("shot", provider, request)
    assert left["why"] == "no answer (ConnectError)", left
