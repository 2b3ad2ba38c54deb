"""Outside audit 21c: the provider adapters against the providers' wire formats (README "Providers")
and reference images (README "Review gates, dependencies and reference images"), through the real ``afc`` command against the fake providers
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
        self.path, self.command = h.path, h.command  # the fake reads the model from the path
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


def redirect_loop(fake, name: str, gets: int, only=lambda args: True) -> None:
    """Make ``fake``'s handler ``name`` answer its first ``gets`` GETs (those ``only`` takes,
    by the handler's arguments) with a 302 back to the same URL, as a proxy or a captive
    portal in a redirect loop does for a while: more than a GET's 20 redirects in a row."""
    handler = getattr(fake, name)
    left = {"n": gets}

    def wrapped(h, *args):
        if h.command == "GET" and only(args):
            with fake.lock:
                loop = left["n"] > 0
                left["n"] -= 1
            if loop:
                return h.reply(302, raw=b"", headers={"Location": h.path})
        return handler(h, *args)

    setattr(fake, name, wrapped)


@pytest.mark.parametrize(
    "provider, handler, only",
    [
        ("replicate", "replicate_get", lambda args: True),
        ("fal", "fal_request", lambda args: args[2] == "/status"),
        ("fal", "fal_request", lambda args: args[2] == ""),
    ],
    ids=["replicate-poll", "fal-poll", "fal-result"],
)
def test_a_redirect_loop_on_a_free_get_is_tried_again_not_a_bug_that_stops_the_run(
    afc, fake, provider, handler, only
):
    """A poll of a submitted request (or fal's result) redirected in a loop for a while:
    httpx's TooManyRedirects is no transport error, so it escaped the adapter, the run
    stopped as at a bug in afc ('could not be read ... please report it'), and the attempt
    ended failed though its request ran on at the provider: the next run paid for a new one.
    A GET that gets no answer through the loop is a failed poll (or a round of the result's
    fetch) like a 503, made again, and the request's one payment renders the job."""
    redirect_loop(fake, handler, 25, only)
    result = run(afc, provider, "a lighthouse")
    assert result.returncode == 0, result.stderr
    assert "could not be read" not in result.stderr
    assert fake.counts[f"{provider}_submit"] == 1
    [attempt] = afc.json("show", "shot")["attempts"]
    assert attempt["status"] == "succeeded", attempt


def test_a_gemini_429_saying_retry_after_in_a_header_is_waited_for(afc, fake):
    """A Gemini 429 whose wait is in a ``Retry-After`` header (a gateway or proxy in front of
    the API answers so) and not in ``RetryInfo``: the adapter read ``retryDelay`` only, so the
    header was ignored and the retry came at a random moment of the backoff's draw, sooner
    than asked, spending the model's attempts on more 429s. It is honoured (up to the cap) as
    every other provider's is."""
    gemini = fake.gemini

    def wrapped(h, model):
        if fake.first_time("gemini 429"):
            h.body()
            return h.reply(
                429,
                {
                    "error": {
                        "code": 429,
                        "message": "Resource has been exhausted (e.g. check quota).",
                        "status": "RESOURCE_EXHAUSTED",
                    }
                },
                headers={"Retry-After": "2"},
            )
        return gemini(h, model)

    fake.gemini = wrapped
    result = run(afc, "gemini", "a lighthouse")
    assert result.returncode == 0, result.stderr
    first, second = afc.json("show", "shot")["attempts"]
    assert (first["error_class"], first["http_status"]) == ("rate_limited", 429)
    assert second["status"] == "succeeded"
    assert second["waited_s"] == pytest.approx(0.05)  # Retry-After 2 s, capped by FAST


@pytest.mark.parametrize("field", [["image"], 5, ""])
def test_a_replicate_inputs_field_that_is_no_field_name_is_a_manifest_error(afc, fake, field):
    """``params.inputs_field`` (Replicate: the model input that takes the reference images)
    given as a list or a number passed the manifest; each run then stopped at the job's
    first attempt with "could not be read (AttributeError: 'list' object has no attribute
    'endswith') ... a bug in afc's replicate adapter", the attempt recorded failed at a cost
    unknown (possibly paid) though nothing was sent, and every 'afc resume' did it again.
    It is a manifest error naming the field (exit 2, nothing written)."""
    from afc_cli.providers.local import render_png

    (afc.cwd / "ref.png").write_bytes(render_png("a reference", 16, 16))
    data = manifest(
        [
            {
                "key": "shot",
                "prompt": "the shot",
                "params": {"inputs_field": field},
                "inputs": [{"path": "ref.png"}],
            }
        ],
        rates=RATES,
    )
    data["defaults"]["chain"] = [
        {"provider": "replicate", "model": MODELS["replicate"], "backoff": FAST}
    ]
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 2, result.stderr
    assert "params.inputs_field" in result.stderr and "could not be read" not in result.stderr
    assert fake.counts["replicate_submit"] == 0
    assert not (afc.cwd / "afc.db").exists() or afc.rows("SELECT COUNT(*) FROM jobs") == [(0,)]
