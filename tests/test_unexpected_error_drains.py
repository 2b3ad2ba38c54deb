"""An error afc did not expect (a bug of its own), met by one job, beside another job's paid
call in flight.

``run._all_done`` stopped the run by cancelling every other job's task at once for any error
but the few it knew (``StopsRun``, ``LedgerWriteError``): a paid call cancelled there was left
``unknown`` and, for a synchronous provider, paid for again by the next run. Every error now
drains the run as a first signal does: no new call starts, the calls in flight finish and are
recorded at their cost, their renders kept, and the run then ends with the error (outside
audit 54b named the class)."""

from __future__ import annotations

from conftest import manifest

RATES = [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}]
CHAIN = [{"provider": "openai", "model": "gpt-image-1", "attempts": 1}]


def test_an_error_of_afcs_own_lets_the_other_paid_calls_finish(afc, fake):
    """'fast' is rendered and in the spool when its store step meets an error afc does not
    expect (AFC_FAIL_POINT raises it there), while 'slow''s paid call is in flight. That call
    finishes and is recorded at its cost, its render kept in the spool; the run exits 1
    naming the error without a traceback; the next run stores both renders, paying for
    nothing again."""
    data = manifest(
        [{"key": "fast", "prompt": "fast"}, {"key": "slow", "prompt": "slow-2s slow"}],
        rates=RATES,
    )
    data["defaults"]["chain"] = CHAIN
    afc.write_manifest(data)
    first = afc("submit", "manifest.yaml", env={"AFC_FAIL_POINT": "spooled"})
    assert first.returncode == 1, first.stderr
    assert "fail point spooled" in first.stderr, first.stderr
    assert "Traceback" not in first.stderr, first.stderr
    # one call in flight, 'slow''s: the line counted the job whose task had just ended in its
    # error too, 'for 2 job(s) in a call' (it stayed in ``RunContext.protected``; outside
    # audit 54e)
    assert "for 1 job(s) in a call" in first.stderr, first.stderr
    assert fake.counts["openai_billed"] == 2, first.stderr
    assert afc.rows(
        "SELECT j.key, a.status, a.cost_micros FROM attempts a JOIN jobs j ON j.id = a.job_id"
        " ORDER BY j.key"
    ) == [("fast", "succeeded", 40_000), ("slow", "succeeded", 40_000)], first.stderr
    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert afc.rows("SELECT key, status FROM jobs ORDER BY key") == [
        ("fast", "succeeded"),
        ("slow", "succeeded"),
    ]
    assert fake.counts["openai_billed"] == 2, "a paid render was paid for again"
    assert {p.name for p in (afc.outputs() / "b1").glob("*.png")} == {"fast.png", "slow.png"}
