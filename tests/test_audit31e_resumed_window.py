"""Outside audit 31e: a Replicate prediction a run resumed (one a killed run left, polled by
its id: ``pipeline._resumable``) that its attempt window's end finds ended. Through the real
``afc`` command against the fake Replicate server (tests/fakeproviders.py), whose
"done-at-cancel" / "flagged-at-cancel" predictions render until the cancel at the window's
end finds them succeeded / failed (refused)."""

from __future__ import annotations

import signal

from conftest import manifest
from test_providers import FAST, MODELS, RATES


def _killed_after_submit(afc, prompt: str) -> str:
    chain = [
        {
            "provider": "replicate",
            "model": MODELS["replicate"],
            "attempts": 2,
            "window_s": 1,
            "backoff": FAST,
            "fallback_on": ["window_expired", "refusal"],
        },
        {"provider": "openai", "model": MODELS["openai"], "backoff": FAST},
    ]
    afc.write_manifest(manifest([{"key": "shot", "prompt": prompt, "chain": chain}], rates=RATES))
    killed = afc("submit", "manifest.yaml", env={"AFC_CRASH_POINT": "after_submit"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    [(request_id,)] = afc.rows("SELECT provider_request_id FROM attempts")
    return request_id


def test_a_resumed_prediction_its_window_cancel_finds_succeeded_is_kept(afc, fake):
    """The run that resumed the prediction asked Replicate to stop it at the window's end, and
    Replicate answered it had succeeded (it cannot be cancelled). A fresh attempt's such
    prediction is read by its id; a resumed one was recorded failed 'window_expired' at a cost
    unknown, and the chain's next model paid again for the output the prediction had made."""
    request_id = _killed_after_submit(afc, "done-at-cancel shot")
    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert fake.cancels == [request_id]
    assert fake.counts["replicate_submit"] == 1, "paid once"
    assert fake.counts["openai"] + fake.counts["openai_edits"] == 0, "a second provider paid"
    [attempt] = afc.json("show", "shot")["attempts"]
    assert (attempt["provider"], attempt["status"]) == ("replicate", "succeeded")
    assert attempt["cost"] == "0.003840"  # 3.2 s of predict_time at the card's 0.0012/s
    assert (afc.outputs() / "b1" / "shot.png").read_bytes().startswith(b"\x89PNG")


def test_a_resumed_prediction_its_window_cancel_finds_refused_is_the_refusal(afc, fake):
    """The same for one that had failed, flagged (E005): the refusal at its seconds, then the
    chain's rule for a refusal (the model's next attempt), not 'window_expired' at a cost
    unknown."""
    request_id = _killed_after_submit(afc, "flagged-at-cancel shot")
    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert fake.cancels[0] == request_id
    attempts = afc.json("show", "shot")["attempts"]
    first = attempts[0]
    assert (first["provider"], first["status"], first["error_class"]) == (
        "replicate",
        "failed",
        "refusal",
    )
    assert first["cost"] == "0.001800"  # 1.5 s of predict_time at the card's 0.0012/s
    assert attempts[1]["provider"] == "replicate", "the model's next attempt, as for a refusal"
