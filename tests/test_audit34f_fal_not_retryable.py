"""Outside audit 34f: fal's ``X-Fal-Retryable: false`` on a 5xx or a 429. fal's error
answers carry the header to say whether "retrying the exact same request might succeed"
(fal's Model Errors page); afc read ``false`` as invalid input whatever the status, so one of
fal's own 500s (a model's ``internal_server_error``), 503s or 429s stopped the whole chain:
the job failed as ``invalid`` and the fallback model the manifest names was never tried.
Through the real ``afc`` command against the fake fal queue and Replicate
(tests/fakeproviders.py), fal's submit answer replaced here."""

from __future__ import annotations

import pytest
from conftest import manifest
from test_providers import FAST, MODELS, RATES

# fal's model-error body (a ``detail`` list of typed errors), as its Model Errors page shows it
BODIES = {
    500: {"detail": [{"loc": ["body"], "msg": "Internal error", "type": "internal_server_error"}]},
    503: {
        "detail": [
            {"loc": ["body"], "msg": "Unavailable", "type": "downstream_service_unavailable"}
        ]
    },
    429: {"detail": "Too many requests"},
    422: {
        "detail": [{"loc": ["body", "image_size"], "msg": "too large", "type": "image_too_large"}]
    },
}


def refused_not_retryable(fake, status: int) -> None:
    """Every fal submit answered ``status`` with ``X-Fal-Retryable: false``."""

    def wrapped(h, model):
        h.body()
        fake.count("fal_submit")
        return h.reply(status, BODIES[status], headers={"X-Fal-Retryable": "false"})

    fake.fal_submit = wrapped


def submit(afc) -> list[dict]:
    data = manifest([{"key": "shot", "prompt": "a lighthouse"}], rates=RATES)
    data["defaults"]["chain"] = [
        {"provider": "fal", "model": MODELS["fal"], "attempts": 2, "backoff": FAST},
        {"provider": "replicate", "model": MODELS["replicate"], "attempts": 1, "backoff": FAST},
    ]
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml", "--json")
    assert result.returncode in (0, 1), result.stderr
    return afc.json("show", "shot")["attempts"]


@pytest.mark.parametrize(
    "status, cls", [(500, "server"), (503, "unavailable"), (429, "rate_limited")]
)
def test_a_fal_5xx_or_429_it_marks_not_retryable_leaves_the_chain_its_fallback(
    afc, fake, status, cls
):
    """Classed by its status as README 'Error classes' says (500 ``server``, 503
    ``unavailable``, 429 ``rate_limited``): fal's own refused submit costs nothing, the
    model's attempts end, and the chain moves on to the model it falls back to."""
    refused_not_retryable(fake, status)
    *fal, replicate = submit(afc)
    assert [a["provider"] for a in fal] == ["fal", "fal"]
    for attempt in fal:
        assert (attempt["error_class"], attempt["http_status"]) == (cls, status), attempt
        assert attempt["cost"] == "0.000000"
    assert replicate["provider"] == "replicate" and replicate["status"] == "succeeded"
    assert afc.json("show", "shot")["job"]["status"] == "succeeded"


def test_a_fal_4xx_it_marks_not_retryable_is_still_invalid_input(afc, fake):
    """A 4xx marked not retryable (the model refuses the input) still ends the chain."""
    refused_not_retryable(fake, 422)
    [attempt] = submit(afc)
    assert (attempt["error_class"], attempt["http_status"]) == ("invalid", 422)
    assert afc.json("show", "shot")["job"]["status"] == "failed"
