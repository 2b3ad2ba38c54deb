"""A fal request that ended in one of fal's own 5xx answers its result URL with that error.

fal's status endpoint says COMPLETED for a request that failed (its documented fields are
``logs`` and ``metrics``); the failure is the result itself: fal's request-error shape
(``{"detail", "error_type"}`` and the ``X-Fal-Error-Type`` header, with the request's
``x-fal-request-id``), at the status it ended with (``request_timeout`` 504,
``runner_disconnected`` 503, ``runner_server_error`` 500...), every time it is asked. fal
bills no request that ends in a 5xx, and its own client does not ask again for such an
answer (it retries only an ingress error: a gateway's page without fal's request id).

Before (outside audit 59b): afc took that answer for the result URL out of reach for a
moment (``OutputUnreachable``), fetched it again in rounds for as long as fal keeps a result
(5 minutes) or the attempt's window allowed, then failed the attempt ``unavailable`` at a
cost unknown (counted as possibly paid by every report). Measured here with an 8 s window:
the one answer asked for 32-36 times over 9 s, the attempt left unpriced; with no window,
some 1,000 times over 5 minutes (AFC_POLL_S 0.05), before the next attempt began. Now the first
answer ends the attempt: classed by fal's status for its error type, as the same error in a
status is (``unavailable`` for a 504), at a known cost of 0, and the next attempt renders.
"""

from __future__ import annotations

from conftest import manifest
from test_providers import FAST, MODELS, RATES, attempts_of


def test_a_fal_result_that_is_fals_own_5xx_ends_the_attempt_unbilled_at_once(afc, fake):
    data = manifest([{"key": "j0", "prompt": "result-ended shot"}], rates=RATES)
    data["defaults"]["chain"] = [
        {"provider": "fal", "model": MODELS["fal"], "attempts": 3, "backoff": FAST, "window_s": 8}
    ]
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml", "--json")
    assert result.returncode == 0, result.stderr
    assert afc.json("show", "j0")["job"]["status"] == "succeeded"

    ended = [r for r in fake.fal.values() if r.get("ended_5xx")]
    assert len(ended) == 1
    assert ended[0]["result_gets"] == 1, (
        f"fal's own end of the request was asked for {ended[0]['result_gets']} times"
    )
    first, second = attempts_of(afc, "j0")
    assert first["status"] == "failed", first
    assert first["error_class"] == "unavailable", first
    assert first["http_status"] == 504, first
    assert first["cost"] == "0.000000", first  # a request fal ended in a 5xx: not billed
    assert first["cost_source"] == "derived", first
    assert first["error"] == "fal: result: Request timed out (request_timeout)", first
    assert second["status"] == "succeeded", second
    assert fake.counts["fal_submit"] == 2
    assert "is out of reach" not in result.stderr, result.stderr
    assert (afc.outputs() / "b1" / "j0.png").read_bytes()
