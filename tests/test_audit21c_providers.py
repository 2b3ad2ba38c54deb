"""Outside audit 21c: the provider adapters against PROVIDERS.md and reference images (SPEC
section 12), through the real ``afc`` command against the fake providers
(tests/fakeproviders.py), extended here where a wire behaviour was missing."""

from __future__ import annotations

import json

import pytest
from conftest import manifest
from test_providers import FAST, MODELS, RATES


class Quiet:
    """A request handler of the fake providers whose reply is kept, not sent: the fake does
    its work (creates the prediction, queues the request) and this test answers instead."""

    def __init__(self, h):
        self.h = h
        self.headers = h.headers
        self._body = h.body()
        self.replied: tuple | None = None

    def body(self):
        return self._body

    def reply(self, status, body=None, headers=None, raw=None, ctype="application/json"):
        self.replied = (status, body)


def gateway_408(fake, name: str) -> None:
    """Make ``fake``'s submit of ``name`` (``replicate_submit``, ``fal_submit``) reach the
    provider, which creates and bills the request, and answer its first one for a
    ``gateway-408`` prompt with a gateway's 408 (it stopped waiting for the provider's answer),
    as a proxy or load balancer in front of the API does."""
    submit = getattr(fake, name)

    def wrapped(h, *args):
        quiet = Quiet(h)
        submit(quiet, *args)
        payload = quiet.body()
        prompt = payload.get("prompt") or (payload.get("input") or {}).get("prompt", "")
        if "gateway-408" in prompt and fake.first_time(f"408 {prompt}"):
            assert quiet.replied[0] in (200, 201), quiet.replied  # created, billed
            return h.reply(408, raw=b"<html>408 Request Timeout</html>", ctype="text/html")
        status, body = quiet.replied
        return h.reply(status, body)

    setattr(fake, name, wrapped)


def run(afc, provider, prompt, attempts=2):
    data = manifest([{"key": "shot", "prompt": prompt}], rates=RATES)
    data["defaults"]["chain"] = [
        {"provider": provider, "model": MODELS[provider], "attempts": attempts, "backoff": FAST}
    ]
    afc.write_manifest(data)
    return afc("submit", "manifest.yaml", "--json")


@pytest.mark.parametrize("provider", ["replicate", "fal"])
def test_a_submit_a_gateway_answered_408_stays_possibly_paid(afc, fake, provider):
    """A 408 on a job-style submit from a gateway that stopped waiting: the provider may have
    created the request (here it did, and billed it) with its id lost with the answer. The
    attempt was recorded at a known cost of 0, so the costs report called the first,
    billed, request free (OpenAI's and Gemini's 408 already stay unknown: ``refused_free``)."""
    gateway_408(fake, f"{provider}_submit")
    result = run(afc, provider, "gateway-408")
    assert result.returncode == 0, result.stderr
    billed = [entry for entry in fake.log if entry[1] == provider and entry[3]]
    assert len(billed) == 2  # the request behind the 408, and the retry's
    first, second = afc.json("show", "shot")["attempts"]
    assert (first["status"], first["error_class"], first["http_status"]) == (
        "failed",
        "unavailable",
        408,
    )
    assert first["cost"] is None, first  # possibly paid: unknown, never a known 0
    assert second["status"] == "succeeded"
    report = afc.json("costs", "report")["total"]
    assert report["unpriced_attempts"] == 1, report
    assert json.loads(result.stdout)["jobs"][0]["status"] == "succeeded"
