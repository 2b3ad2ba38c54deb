"""The attempt runner's decisions and the backoff maths, without sleeping."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from afc_cli.attempts import GiveUp, PastAttempt, Try, backoff_delay, next_try


def entry(provider="p", model="a", attempts=3, fallback_on=("exhausted",), base=1.0, cap=30.0):
    return {
        "provider": provider,
        "model": model,
        "attempts": attempts,
        "fallback_on": list(fallback_on),
        "backoff": {"base": base, "cap": cap},
    }


def failed(cls, index=0, provider="p", model="a", http=None):
    return PastAttempt(index, "failed" if cls else "unknown", cls, provider, model, http, "msg")


def half(_=None):
    return 0.5


@given(
    failures=st.integers(min_value=1, max_value=80),
    base=st.floats(min_value=0.001, max_value=100),
    cap=st.floats(min_value=0.001, max_value=1000),
    r=st.floats(min_value=0, max_value=1, exclude_max=True),
)
def test_full_jitter_stays_within_bounds(failures, base, cap, r):
    delay = backoff_delay(failures, base=base, cap=cap, rand=lambda: r)
    ceiling = min(cap, base * 2 ** (failures - 1))
    assert 0 <= delay <= ceiling
    assert delay == r * ceiling


@given(
    retry_after=st.floats(min_value=0, max_value=1e6), cap=st.floats(min_value=0.1, max_value=600)
)
def test_retry_after_is_honoured_up_to_the_cap(retry_after, cap):
    delay = backoff_delay(1, base=1, cap=cap, retry_after=retry_after, rand=lambda: 0.0)
    assert delay == min(retry_after, cap)


@given(
    failures=st.integers(min_value=1, max_value=70),
    r=st.floats(min_value=0, max_value=1),
    retry_after=st.floats(min_value=0, max_value=1e6),
)
def test_retry_after_is_a_floor_over_the_jitter_never_a_shortcut(failures, r, retry_after):
    """A provider (or gateway) answering 429 with ``Retry-After: 0`` gets the backoff's draw,
    not an immediate retry that spends the model's attempts within a second."""
    drawn = backoff_delay(failures, base=2, cap=60, rand=lambda: r)
    delay = backoff_delay(failures, base=2, cap=60, retry_after=retry_after, rand=lambda: r)
    assert delay == max(drawn, min(retry_after, 60))


def test_retry_after_zero_backs_off_like_no_retry_after():
    decision = next_try(
        [entry()], [failed("rate_limited"), failed("rate_limited")], retry_after=0, rand=half
    )
    assert decision.delay == 0.5 * 2.0  # the second failure's ceiling (base 1), half drawn


def test_backoff_grows_exponentially_until_the_cap():
    ceilings = [backoff_delay(n, base=2, cap=20, rand=lambda: 1.0) for n in range(1, 7)]
    assert ceilings == [2, 4, 8, 16, 20, 20]
    assert backoff_delay(0, base=2, cap=20) == 0.0


def test_first_try_is_the_first_model():
    assert next_try([entry()], []) == Try(0, 0.0, None)


def test_stop_chain_classes_fail_at_once():
    for cls in ("auth", "invalid", "cancelled"):
        decision = next_try([entry(), entry(model="b")], [failed(cls, http=401)])
        assert isinstance(decision, GiveUp)
        assert decision.cause.error_class == cls


def test_transient_classes_back_off_on_the_same_model():
    for cls in ("rate_limited", "timeout", "unavailable", "server", None):
        decision = next_try([entry()], [failed(cls), failed(cls)], rand=half)
        assert decision == Try(0, 0.5 * min(30.0, 1.0 * 2), cls or "unknown")


def test_retry_after_overrides_jitter():
    decision = next_try([entry()], [failed("rate_limited")], retry_after=7, rand=half)
    assert decision.delay == 7
    capped = next_try([entry(cap=5)], [failed("rate_limited")], retry_after=700)
    assert capped.delay == 5


def test_exhausted_model_falls_back_only_if_allowed():
    chain = [entry(attempts=2), entry(model="b")]
    history = [failed("server"), failed("server")]
    assert next_try(chain, history) == Try(1, 0.0, "server")
    chain[0]["fallback_on"] = ["refusal"]
    decision = next_try(chain, history)
    assert isinstance(decision, GiveUp)
    assert decision.cause.error_class == "server"
    assert "does not allow" in decision.reason


def test_unavailable_listed_falls_back_after_its_attempts():
    chain = [entry(attempts=1, fallback_on=["unavailable"]), entry(model="b")]
    assert next_try(chain, [failed("unavailable")]) == Try(1, 0.0, "unavailable")


def test_refusal_uses_same_model_first_then_falls_back_if_allowed():
    chain = [entry(attempts=2, fallback_on=["refusal"]), entry(model="b")]
    assert next_try(chain, [failed("refusal")]) == Try(0, 0.0, "refusal")
    assert next_try(chain, [failed("refusal"), failed("refusal")]) == Try(1, 0.0, "refusal")
    chain[0]["fallback_on"] = ["exhausted"]
    assert isinstance(next_try(chain, [failed("refusal"), failed("refusal")]), GiveUp)


def test_window_expired_never_retries_the_model():
    chain = [entry(attempts=5, fallback_on=["window_expired"]), entry(model="b")]
    assert next_try(chain, [failed("window_expired")]) == Try(1, 0.0, "window_expired")
    chain[0]["fallback_on"] = ["exhausted"]
    decision = next_try(chain, [failed("window_expired")])
    assert isinstance(decision, GiveUp) and decision.cause.error_class == "window_expired"


def test_exhausted_chain_fails_with_last_real_cause():
    chain = [entry(attempts=1), entry(model="b", attempts=2)]
    history = [
        failed("server"),
        failed("rate_limited", 1, model="b"),
        failed("timeout", 1, model="b"),
    ]
    decision = next_try(chain, history)
    assert isinstance(decision, GiveUp)
    assert decision.cause.error_class == "timeout"
    assert decision.cause.model == "b"
    assert "no model follows" in decision.reason


def test_fallback_model_counts_its_own_attempts_and_backoff():
    chain = [entry(attempts=1), entry(model="b", attempts=3, base=4)]
    history = [failed("server"), failed("server", 1, model="b")]
    decision = next_try(chain, history, rand=lambda: 1.0)
    assert decision == Try(1, 4.0, "server")


def test_parse_retry_after_seconds_and_http_dates():
    from afc_cli.attempts import parse_retry_after

    now = 1_700_000_000.0
    assert parse_retry_after("7", now=now) == 7.0
    assert parse_retry_after("0.5", now=now) == 0.5
    assert parse_retry_after(" 30 ", now=now) == 30.0
    assert parse_retry_after("-3", now=now) == 0.0
    assert parse_retry_after(None) is None and parse_retry_after("") is None
    assert parse_retry_after("soon", now=now) is None
    assert parse_retry_after("nan", now=now) is None
    # Tue, 14 Nov 2023 22:13:40 GMT is now + 20 s
    assert parse_retry_after("Tue, 14 Nov 2023 22:13:40 GMT", now=now) == pytest.approx(20.0)
    assert parse_retry_after("Tue, 14 Nov 2023 22:00:00 GMT", now=now) == 0.0


def test_retry_after_recorded_on_the_attempt_carries_across_runs():
    history = [PastAttempt(0, "failed", "rate_limited", "p", "a", 429, "m", retry_after=9.0)]
    assert next_try([entry()], history, rand=half).delay == 9.0
