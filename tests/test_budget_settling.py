"""A budget refusal while this run's own calls are in flight: their reservations may come
back (a failure, a refusal, a 429 are not billed), so the refused job waits for them rather
than stop the run (``pipeline._may_make_room``)."""

from __future__ import annotations

from conftest import manifest


def _refused(n: int) -> dict:
    """``n`` jobs whose one call fails as a refusal after 0.6 s (free, no retry), each call
    reserving 0.01."""
    jobs = [
        {"key": f"r{i}", "prompt": "p", "params": {"fail": ["refusal"], "latency_s": 0.6}}
        for i in range(n)
    ]
    data = manifest(jobs)
    data["defaults"]["chain"][0]["attempts"] = 1
    data["rates"] = [{"provider": "local", "model": "m1", "per_image": "0.01"}]
    return data


def test_a_budget_filled_by_calls_that_come_back_free_does_not_stop_the_run(afc):
    """Two calls in flight held the whole cap (0.02) when the next two jobs asked for room:
    the run stopped at once, 'stopped by the budget' (exit 4), and when both calls came back
    free (refused, not billed) it had spent nothing, its two other jobs never tried. Those
    jobs now wait for the calls in flight and are tried in the room they leave."""
    afc.write_manifest(_refused(4))
    result = afc("submit", "manifest.yaml", "--max-spend", "0.02", "--concurrency", "4")
    assert "stopped by the budget" not in result.stderr, result.stderr
    assert "4 failed" in result.stderr, result.stderr
    assert "this run spent 0.000000 USD" in result.stderr, result.stderr
    assert result.returncode == 1, result.stderr  # its jobs failed; no budget stop (4)
    status = afc.json("status", "--all", expect=None)
    assert {j["key"]: j["status"] for j in status["jobs"]} == {f"r{i}": "failed" for i in range(4)}


def test_room_the_calls_in_flight_cannot_make_still_stops_the_run(afc):
    """Where the calls in flight could not make room even free (the run's known spend is
    already at the cap), the refused job stops the run as before (exit 4)."""
    data = _refused(0)
    data["jobs"] = [
        {"key": "ok0", "prompt": "p"},
        {"key": "slow", "prompt": "p", "params": {"latency_s": 0.6}},
        {"key": "late", "prompt": "p"},
    ]
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml", "--max-spend", "0.02", "--concurrency", "4")
    assert result.returncode == 4, result.stderr
    assert "this run spent 0.020000 USD" in result.stderr, result.stderr
