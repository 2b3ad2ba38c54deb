"""Outside audit 24b (multi-step jobs, reference images, provider fallback), through the real
``afc`` command with the fake providers at the wire (tests/fakeproviders.py)."""

from __future__ import annotations

from conftest import manifest
from test_providers import FAST, MODELS, RATES


def _fal_then_openai(prompt: str, **top) -> dict:
    chain = [
        {
            "provider": "fal",
            "model": MODELS["fal"],
            "attempts": 1,
            "backoff": FAST,
            "window_s": 1,
            "fallback_on": ["window_expired"],
        },
        {"provider": "openai", "model": MODELS["openai"], "backoff": FAST},
    ]
    return manifest([{"key": "shot", "prompt": prompt, "chain": chain}], rates=RATES, **top)


def test_a_fal_request_that_completed_as_its_window_ended_is_fetched_not_paid_again(afc, fake):
    """A fal request afc stopped waiting for at its ``window_s`` is asked to cancel; fal
    answers ALREADY_COMPLETED when it finished meanwhile (between afc's last poll and the
    cancel): rendered and billed, its result kept at fal. afc recorded it window_expired at
    an unknown cost and fell back to the next model, paying a second provider for the one
    output (with fal alone, the job failed, and 'afc retry' paid fal again). The completed
    request is now polled by its id (free) and its result stored: one attempt, one payment."""
    afc.write_manifest(_fal_then_openai("done-at-cancel shot"))
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    assert len(fake.cancels) == 1, "the window passed: the request was asked to stop"
    assert fake.counts["fal_submit"] == 1
    assert fake.counts["openai"] + fake.counts["openai_edits"] == 0, "a second provider paid"
    [attempt] = afc.json("show", "shot")["attempts"]
    assert (attempt["provider"], attempt["status"]) == ("fal", "succeeded")
    assert attempt["cost"] == "0.025000"  # its one image, priced as the card says
    assert afc.json("costs", "report")["total"]["priced"] == "0.025000"
    assert (afc.outputs() / "b1" / "shot.png").read_bytes().startswith(b"\x89PNG")


def test_a_fal_request_cancelled_at_its_window_still_falls_back(afc, fake):
    """The rule above takes only a request fal says completed: one it cancels (still
    rendering) is window_expired at an unknown cost, and the next model renders."""
    afc.write_manifest(_fal_then_openai("hold shot"))
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    first, second = afc.json("show", "shot")["attempts"]
    assert (first["provider"], first["error_class"], first["cost"]) == (
        "fal",
        "window_expired",
        None,
    )
    assert (second["provider"], second["status"]) == ("openai", "succeeded")
