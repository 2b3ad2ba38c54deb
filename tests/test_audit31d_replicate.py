"""Outside audit 31d: the Replicate adapter against Replicate's wire facts (its prediction
lifecycle, its cancel answering with the prediction). Through the real ``afc`` command
against the fake Replicate server (tests/fakeproviders.py)."""

from __future__ import annotations

from conftest import manifest
from test_providers import FAST, MODELS, RATES, attempts_of, run


def test_a_prediction_its_cancel_finds_succeeded_is_kept_not_paid_for_again(afc, fake):
    """A prediction whose polls never answered a status afc can read (a proxy's page, a body
    cut short) is asked to stop after UNREADABLE_POLLS of them. Replicate answers a cancel with
    the prediction; one that had succeeded meanwhile cannot be cancelled and comes back
    ``succeeded``, its output and its predict_time in that answer. afc threw that answer away:
    the attempt failed 'server' at a cost unknown, and the next attempt submitted, and paid
    for, a second prediction for the output the first had made. The cancel's answer is now read
    as the prediction's last poll: its output is fetched and stored, at its cost."""
    jobs = run(afc, "replicate", ["garbled-forever done-at-cancel"], expect=0, attempts=2)
    assert jobs["j0"]["status"] == "succeeded"
    assert fake.counts["replicate_submit"] == 1, "paid once"
    [attempt] = attempts_of(afc, "j0")
    assert fake.cancels == [attempt["provider_request_id"]]
    assert attempt["status"] == "succeeded"
    assert attempt["cost"] is not None and attempt["usage"]["seconds"] == 3.2


def test_a_prediction_its_cancel_finds_refused_is_a_refusal_at_its_cost(afc, fake):
    """The same cancel's answer for a prediction that had failed meanwhile, flagged (E005):
    afc called it a 'server' failure of unknown cost, so a chain whose fallback_on names
    refusal never reached the model meant for what this one refuses, and its seconds went
    unpriced. It is the refusal the answer says, at its seconds."""
    jobs = run(afc, "replicate", ["garbled-forever flagged-at-cancel"], expect=1, attempts=1)
    assert jobs["j0"]["error"]["class"] == "refusal"
    [attempt] = attempts_of(afc, "j0")
    assert fake.cancels == [attempt["provider_request_id"]]
    assert attempt["error_class"] == "refusal" and "E005" in attempt["error"]
    assert attempt["cost"] == "0.001800" and attempt["usage"] == {"seconds": 1.5}


def _window_chain(afc, prompt: str) -> None:
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


def test_a_prediction_its_window_cancel_finds_refused_is_recorded_as_the_refusal(afc, fake):
    """At an attempt window's end afc asks Replicate to stop the prediction it leaves, and
    Replicate answers with the prediction. One that had failed meanwhile, flagged (E005),
    was recorded 'window_expired' at a cost unknown (counted as possibly paid, its estimate
    held by a budget), so the chain gave up on the model for a window that had not been the
    cause. It is now read by its id, as one that succeeded is: the refusal at its seconds,
    then the chain's rule for a refusal (the model's next attempt first)."""
    _window_chain(afc, "flagged-at-cancel shot")
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    attempts = afc.json("show", "shot")["attempts"]
    first = attempts[0]
    assert (first["provider"], first["status"], first["error_class"]) == (
        "replicate",
        "failed",
        "refusal",
    )
    assert first["cost"] == "0.001800"  # 1.5 s of predict_time at the card's 0.0012/s
    assert attempts[1]["provider"] == "replicate", "the model's next attempt, as for a refusal"


def test_a_prediction_its_window_cancel_finds_aborted_cost_nothing(afc, fake):
    """One Replicate aborted (its Cancel-After deadline passed before it started) is not
    charged: recorded so, not as possibly paid."""
    _window_chain(afc, "aborted-at-cancel shot")
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    first = afc.json("show", "shot")["attempts"][0]
    assert (first["provider"], first["error_class"]) == ("replicate", "window_expired")
    assert (first["cost"], first["cost_source"]) == ("0.000000", "derived")
