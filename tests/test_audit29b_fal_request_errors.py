"""Outside audit 29b: a fal queue request that ends in one of fal's own request errors. fal's
reference of them (its "Request Error Types" page) names thirteen ``error_type`` values, ten
of them ending the request in a 5xx (500, 502, 503, 504), and fal bills no request that ends in
a 5xx. Through the real ``afc`` command against the fake fal queue (tests/fakeproviders.py),
its status answer replaced here for the first request."""

from __future__ import annotations

import pytest
from conftest import manifest
from test_providers import FAST, MODELS, RATES


def ends_in(fake, error_type: str) -> None:
    """The first request's status: COMPLETED with fal's ``error_type`` (its later ones as the
    fake answers them)."""
    request = fake.fal_request

    def wrapped(h, method, rid, tail):
        if tail == "/status" and fake.first_time("ended"):
            fake.fal[rid]["status"] = "COMPLETED"
            return h.reply(
                200,
                {
                    "status": "COMPLETED",
                    "logs": None,
                    "error": "Request failed",
                    "error_type": error_type,
                },
            )
        return request(h, method, rid, tail)

    fake.fal_request = wrapped


@pytest.mark.parametrize(
    "error_type, cls",
    [
        ("runner_connection_timeout", "unavailable"),
        ("runner_connection_refused", "unavailable"),
        ("runner_connection_error", "unavailable"),
        ("runner_incomplete_response", "unavailable"),
        ("runner_server_error", "server"),
        ("internal_error", "server"),
        ("runner_disconnected", "unavailable"),  # one afc knew already
    ],
)
def test_a_request_ended_by_a_5xx_request_error_is_known_to_cost_nothing(
    afc, fake, error_type, cls
):
    """Four of the ten (request_timeout, startup_timeout, runner_scheduling_failure,
    runner_disconnected) were known to cost nothing; the other six (a runner's connection
    refused or timed out, its incomplete answer, its 500, fal's internal error) were server
    failures of unknown cost: unpriced, each holding its reservation in a budget, so a fal
    outage of that kind could stop a run at --max-spend with nothing spent. Each is a known
    0, classed by the status fal gives it."""
    ends_in(fake, error_type)
    data = manifest([{"key": "shot", "prompt": "a lighthouse"}], rates=RATES)
    data["defaults"]["chain"] = [
        {"provider": "fal", "model": MODELS["fal"], "attempts": 2, "backoff": FAST}
    ]
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml", "--json")
    assert result.returncode == 0, result.stderr
    first, second = afc.json("show", "shot")["attempts"]
    assert (first["error_class"], first["cost"]) == (cls, "0.000000"), first
    assert error_type in first["error"]
    assert second["status"] == "succeeded"
    assert afc.json("costs", "report")["total"]["unpriced_attempts"] == 0
