"""Outside audit 34f: a Retry-After given as an HTTP date in the asctime form. RFC 9110
(5.6.7) names three forms of an HTTP date and says a recipient MUST accept all three: the
IMF-fixdate (``Sun, 06 Nov 1994 08:49:37 GMT``), the obsolete RFC 850 form and ANSI C's
asctime (``Sun Nov  6 08:49:37 1994``), which names no zone because an HTTP date is always
GMT. afc read the asctime form as no wait at all (the standard library returns it without a
zone, and afc dropped such a date), so a 429's "come back in 30 s" was ignored and the next
attempt came within the backoff's random draw."""

from __future__ import annotations

import time
from email.utils import formatdate

import pytest
from test_providers import attempts_of, run

from afc_cli.attempts import parse_retry_after


def asctime(seconds: float) -> str:
    """``seconds`` (since the epoch) as an HTTP date in ANSI C's asctime form, in GMT."""
    return time.strftime("%a %b %e %H:%M:%S %Y", time.gmtime(seconds))


def test_an_asctime_date_is_read_as_gmt():
    sent = 784111777.0  # Sun, 06 Nov 1994 08:49:37 GMT
    assert asctime(sent) == "Sun Nov  6 08:49:37 1994"
    assert parse_retry_after(asctime(sent + 30), date=formatdate(sent, usegmt=True)) == 30.0
    assert parse_retry_after(asctime(sent + 30), now=sent) == 30.0
    # and as the answer's own Date (the server's clock), whatever this host's says
    assert parse_retry_after(formatdate(sent + 30, usegmt=True), date=asctime(sent)) == 30.0
    assert parse_retry_after(asctime(sent - 30), now=sent) == 0.0


@pytest.mark.parametrize("form", ["asctime", "imf-fixdate"])
def test_a_429s_retry_after_in_asctime_is_the_wait_kept_for_the_next_attempt(afc, fake, form):
    """Through the real ``afc`` command: OpenAI's 429 answered with ``Retry-After`` as an HTTP
    date 30 s after the answer's own Date; the attempt keeps that wait (``retry_after_s``)."""
    openai = fake.openai

    def wrapped(h):
        if fake.first_time("429"):
            h.body()
            now = time.time()
            later = asctime(now + 30) if form == "asctime" else formatdate(now + 30, usegmt=True)
            return h.reply(
                429,
                {
                    "error": {
                        "message": "Rate limit exceeded for images per minute",
                        "type": "requests",
                        "param": None,
                        "code": "rate_limit_exceeded",
                    }
                },
                headers={"Retry-After": later},
            )
        return openai(h)

    fake.openai = wrapped
    jobs = run(afc, "openai", ["a lighthouse"], expect=0)
    assert jobs["j0"]["status"] == "succeeded"
    first, second = attempts_of(afc, "j0")
    assert first["error_class"] == "rate_limited" and second["status"] == "succeeded"
    [(waited,)] = afc.rows("SELECT retry_after_s FROM attempts WHERE number = 1")
    assert waited is not None and 28 <= waited <= 31
