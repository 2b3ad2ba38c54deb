"""Outside audit 32h: an OpenAI Images 429 that names its wait only in its message. Through the
real ``afc`` command against the fake OpenAI server (tests/fakeproviders.py), its answer
replaced here for the first calls."""

from __future__ import annotations

import threading
import time

import pytest
from conftest import manifest
from test_providers import FAST, MODELS, RATES


def _images_per_minute(fake, message: str, for_s: float | None = None) -> None:
    """OpenAI's 429 for gpt-image's images-per-minute limit: the wait is in its words
    ("Please try again in 7.188s", "try again after 51.84 seconds"), no ``Retry-After``, and
    the requests' reset header a moment away (OpenAI sends it on every answer; that limit
    has room). The first call is answered so; with ``for_s``, every call for that long."""
    answer = fake.openai
    began: list[float] = []
    lock = threading.Lock()

    def wrapped(h):
        with lock:
            now = time.monotonic()
            began.append(began[0] if began else now)
            limited = len(began) == 1 or (for_s is not None and now - began[0] < for_s)
        if not limited:
            return answer(h)
        fake.count("openai")
        h.body()
        return h.reply(
            429,
            {
                "error": {
                    "message": message,
                    "type": "requests",
                    "param": None,
                    "code": "rate_limit_exceeded",
                }
            },
            headers={
                "x-ratelimit-limit-requests": "50",
                "x-ratelimit-remaining-requests": "49",
                "x-ratelimit-reset-requests": "6ms",
            },
        )

    fake.openai = wrapped


def _write(afc, backoff) -> None:
    shot = {"key": "shot", "prompt": "a lighthouse at dawn"}
    shot["chain"] = [
        {"provider": "openai", "model": MODELS["openai"], "attempts": 3, "backoff": backoff}
    ]
    afc.write_manifest(manifest([shot], rates=RATES))


@pytest.mark.parametrize(
    "message, wait",
    [
        (
            "Rate limit reached for gpt-image-1 in organization org-x on images per min (IPM): "
            "Limit 5, Used 5, Requested 1. Please try again in 7.188s. Visit "
            "https://platform.openai.com/account/rate-limits to learn more.",
            7.188,
        ),
        (
            "You've exceeded the rate limit, please slow down and try again after 51.84 seconds.",
            51.84,
        ),
        ("Rate limit reached for images per day. Please try again in 5m48.096s.", 348.096),
        ("Rate limit reached for requests. Please try again in 20ms.", 0.02),
    ],
)
def test_a_429_that_names_its_wait_in_words_is_waited_for(afc, fake, message, wait):
    """afc read the wait of OpenAI's 429 from ``Retry-After``, ``retry-after-ms`` or the
    ``x-ratelimit-reset-*`` header only: an images-per-minute 429 that says it in its message
    (gpt-image-1 at tier 1 is 5 images a minute) was retried after the backoff's jitter, a
    fraction of a second, against the same limit."""
    _images_per_minute(fake, message)
    _write(afc, FAST)
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    first, second = afc.json("show", "shot")["attempts"]
    assert (first["error_class"], second["status"]) == ("rate_limited", "succeeded")
    [(said,)] = afc.rows("SELECT retry_after_s FROM attempts WHERE status = 'failed'")
    assert said == pytest.approx(wait)
    # capped by the chain's backoff (FAST: 0.05 s), never a jitter below it
    assert second["waited_s"] == pytest.approx(min(wait, FAST["cap"]))


def test_the_job_is_not_failed_by_retries_inside_the_wait_openai_named(afc, fake):
    """What the user saw: three attempts spent inside the 0.8 s OpenAI named, and the job
    failed ``rate_limited``, where one wait made it."""
    _images_per_minute(fake, "Please slow down and try again after 0.8 seconds.", for_s=0.8)
    _write(afc, {"base": 0.01, "cap": 5})
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    attempts = afc.json("show", "shot")["attempts"]
    assert [a["status"] for a in attempts] == ["failed", "succeeded"]
    assert fake.counts["openai"] == 2
