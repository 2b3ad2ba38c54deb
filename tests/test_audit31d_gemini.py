"""Outside audit 31d: the Gemini adapter against the Gemini API's wire and billing facts.
Through the real ``afc`` command against the fake Gemini server (tests/fakeproviders.py)."""

from __future__ import annotations

from conftest import manifest
from test_providers import MODELS, attempts_of

FAST = {"base": 0.01, "cap": 0.05}
CARD = {"provider": "gemini", "model": MODELS["gemini"], "per_image": "0.04"}


def _write(afc, prompt: str) -> None:
    data = manifest([{"key": "shot", "prompt": prompt}], rates=[CARD])
    data["defaults"]["chain"] = [
        {"provider": "gemini", "model": MODELS["gemini"], "attempts": 2, "backoff": FAST}
    ]
    afc.write_manifest(data)


def test_googles_own_503_costs_nothing_and_holds_no_budget(afc, fake):
    """Gemini's image models answer 503 UNAVAILABLE ("The model is overloaded") often, and
    Google does not charge a request that fails with a 500 error (the Gemini API's billing
    FAQ). afc recorded each such answer as possibly paid, of unknown cost, and a budget
    counted its estimate as spent: here a one-image cap stopped the run (exit 4, 'stopped by
    the budget') after one free 503, never making the image it had room for. Google's own
    error answer (its JSON error body) is a known 0; the image is made within the cap."""
    _write(afc, "overloaded harbour")
    result = afc("submit", "manifest.yaml", "--max-spend", "0.04", "--json")
    assert result.returncode == 0, result.stderr
    first, second = attempts_of(afc, "shot")
    assert (first["error_class"], first["http_status"]) == ("unavailable", 503)
    assert (first["cost"], first["cost_source"]) == ("0.000000", "derived")
    assert second["status"] == "succeeded" and second["cost"] == "0.040000"
    assert afc.json("costs", "report")["total"]["unknown_attempts"] == 0


def test_a_gateways_5xx_in_front_of_gemini_stays_possibly_paid(afc, fake):
    """A 502 page from a proxy or load balancer in front of the API is not Google's answer:
    the request may have reached Gemini and been billed, so its cost stays unknown."""
    _write(afc, "gateway-502 harbour")
    result = afc("submit", "manifest.yaml", "--json")
    assert result.returncode == 0, result.stderr
    first, second = attempts_of(afc, "shot")
    assert (first["error_class"], first["http_status"]) == ("unavailable", 502)
    assert first["cost"] is None
    assert second["status"] == "succeeded"
