"""Outside audit 34f: a Replicate prediction that ran into Replicate's own limit. Predictions
time out after running for 30 minutes (Replicate's prediction lifecycle docs); the prediction
then ends ``failed`` with the error "Prediction timed out", billed for its 30 minutes
(``metrics.predict_time``). afc took it for a passing server failure (``server``) and submitted
the same input to the same model again, each retry another full 30-minute run paid for: three
attempts, 90 minutes billed for one output never made. It is the provider's own window expiring,
as a ``Cancel-After`` deadline's ``canceled`` is: ``window_expired``, which never retries that
model (README "One job's pipeline"), its cost the 30 minutes it reports. Through the real
``afc`` command against the fake Replicate server (tests/fakeproviders.py)."""

from __future__ import annotations

from conftest import manifest
from test_providers import FAST, MODELS, RATES, attempts_of, run


def test_a_prediction_timed_out_by_replicate_is_not_paid_for_again_on_the_same_model(afc, fake):
    jobs = run(afc, "replicate", ["replicate-timeout lighthouse"], expect=1, attempts=3)
    assert fake.counts["replicate_submit"] == 1
    [attempt] = attempts_of(afc, "j0")
    assert attempt["error_class"] == "window_expired"
    # its 30 minutes at the card's 0.0012 a second: known, billed, never a guess of 0
    assert (attempt["cost"], attempt["cost_source"]) == ("2.160000", "derived")
    assert attempt["usage"]["seconds"] == 1800.0
    assert jobs["j0"]["error"]["class"] == "window_expired"
    assert "timed out" in jobs["j0"]["error"]["message"]


def test_a_timed_out_prediction_falls_back_where_the_chain_allows_it(afc, fake):
    data = manifest([{"key": "shot", "prompt": "replicate-timeout lighthouse"}], rates=RATES)
    data["defaults"]["chain"] = [
        {
            "provider": "replicate",
            "model": MODELS["replicate"],
            "attempts": 3,
            "backoff": FAST,
            "fallback_on": ["window_expired"],
        },
        {"provider": "fal", "model": MODELS["fal"], "attempts": 1, "backoff": FAST},
    ]
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml", "--json")
    assert result.returncode == 0, result.stderr
    first, second = attempts_of(afc, "shot")
    assert (first["provider"], first["error_class"]) == ("replicate", "window_expired")
    assert (second["provider"], second["status"]) == ("fal", "succeeded")
    assert fake.counts["replicate_submit"] == 1
