"""Outside audit 54e: an error afc did not expect met by an ``afc worker``'s fed loop
(``run._fed``) itself, between a refill's claim and its jobs' start, beside a paid call in
flight."""

from __future__ import annotations

import pytest
from conftest import manifest, wait_for

RATES = [{"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}]
CHAIN = [{"provider": "openai", "model": "gpt-image-1", "attempts": 1}]


@pytest.mark.parametrize("point", ["refill", "claimed"])
def test_an_error_in_the_fed_loop_lets_the_paid_call_in_flight_finish(afc, fake, point):
    """'slow''s call is in flight when the worker's refill claims 'later' (submitted since)
    and meets an error of afc's own (AFC_FAIL_POINT), in the refill once its claim committed
    ('refill', ``worker.Refill``) or in the loop before it starts the claim's jobs ('claimed',
    ``run._fed``): a bug, a ledger read failing there. A job's error drains the run since 1e45802, but one
    raised by the loop itself went straight out of it: the call in flight was cancelled, its
    attempt left 'unknown', and the next run paid OpenAI for the image again. It now drains
    as a job's does: the call ends, is recorded at its cost and stored, exit 1."""
    first = manifest([{"key": "slow", "prompt": "slow-3s slow"}], rates=RATES, batch="b0")
    first["defaults"]["chain"] = CHAIN
    afc.write_manifest(first, "first.yaml")
    assert afc("submit", "first.yaml", "--no-run").returncode == 0
    worker = afc.popen("worker", "--poll", "0.1", env={"AFC_FAIL_POINT": point})
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts WHERE status = 'started'", 1)
        later = manifest([{"key": "later", "prompt": "later"}], rates=RATES)
        later["defaults"]["chain"] = CHAIN
        afc.write_manifest(later)
        assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
        code = worker.wait(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    err = worker.stderr.read()
    assert code == 1, err
    assert f"fail point {point}" in err, err
    assert "Traceback" not in err, err
    assert afc.rows(
        "SELECT j.key, a.status, a.cost_micros FROM attempts a JOIN jobs j ON j.id = a.job_id"
    ) == [("slow", "succeeded", 40_000)], err
    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert fake.counts["openai_billed"] == 2, "the image in flight was paid for again"
