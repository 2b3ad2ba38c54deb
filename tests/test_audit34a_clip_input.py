"""A job whose ``job`` input is a video model's clip fails INPUT_UNAVAILABLE before anything
is sent, and its message said "(name that job in needs to wait for it alone)". Done under the
same key (inputs: [{job: clip}] made needs: [clip]), that is a changed request: the inputs are
part of the request hash, so the submit was refused IDEMPOTENCY_CONFLICT (exit 3) and the job
stayed failed. The message now says the job that waits for it alone is a new key."""

from __future__ import annotations

from conftest import manifest
from test_audit32h_fal_outputs import _result_of
from test_providers import FAST, MODELS, RATES


def test_a_clip_sent_as_a_reference_names_a_way_out_that_is_no_conflict(afc, fake):
    _result_of(fake, "video", "mp4", "video/mp4")
    fal = [{"provider": "fal", "model": MODELS["fal"], "attempts": 1, "backoff": FAST}]
    local = [{"provider": "local", "model": "m1", "attempts": 1}]
    rates = [*RATES, {"provider": "local", "model": "m1", "per_image": "0.05"}]
    clip = {"key": "clip", "prompt": "a lighthouse, slow dolly in", "chain": fal}
    still = {"key": "still", "prompt": "a still", "chain": local, "inputs": [{"job": "clip"}]}
    afc.write_manifest(manifest([clip, still], rates=rates))
    assert afc("submit", "manifest.yaml").returncode == 1
    ((code, message),) = afc.rows("SELECT error_code, error_message FROM jobs WHERE key = 'still'")
    assert code == "INPUT_UNAVAILABLE", message
    assert "nothing was sent" in message
    assert "new key" in message, message

    # what the old advice led to: the same key naming the clip in needs is refused
    waits = {"key": "still", "prompt": "a still", "chain": local, "needs": ["clip"]}
    afc.write_manifest(manifest([clip, waits], rates=rates))
    assert afc("submit", "manifest.yaml").returncode == 3
    # the way it names now: a new key waits for the clip alone and renders
    waits["key"] = "still-2"
    afc.write_manifest(manifest([clip, waits], rates=rates))
    done = afc("submit", "manifest.yaml")
    assert done.returncode in (0, 1), done.stderr  # 'still' is still failed (exit 1)
    assert afc.rows("SELECT status FROM jobs WHERE key = 'still-2'")[0][0] == "succeeded"
