"""Outside audit 54e: how many calls in flight the stopping line of a run an error stopped
says it waits for."""

from __future__ import annotations

from conftest import manifest

RATES = [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}]
CHAIN = [{"provider": "openai", "model": "gpt-image-1", "attempts": 1}]


def test_the_job_whose_error_stops_the_run_is_not_counted_as_in_flight(afc, fake):
    """'fast' meets an error at its store step (AFC_FAIL_POINT) while 'slow''s paid call is in
    flight: one call. The line said 'waiting up to 30s for 2 job(s) in a call or in their
    storage work', counting the job whose task had just ended in its error (it was never
    taken out of the jobs in a call, ``RunContext.protected``)."""
    data = manifest(
        [{"key": "fast", "prompt": "fast"}, {"key": "slow", "prompt": "slow-2s slow"}],
        rates=RATES,
    )
    data["defaults"]["chain"] = CHAIN
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml", env={"AFC_FAIL_POINT": "spooled"})
    assert result.returncode == 1, result.stderr
    assert "for 1 job(s) in a call" in result.stderr, result.stderr
