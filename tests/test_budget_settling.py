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


def test_a_job_that_waited_for_room_after_its_backoff_does_not_back_off_again(afc):
    """A job whose first call failed (free) waited out its backoff, then met a cap that
    another job's call in flight held, and waited for that call (``_may_make_room``); once
    that call came back free, the job waited out the same backoff a second time before it
    asked again. The backoff is waited once per attempt it follows (in process, its sleeps
    counted, none real)."""
    import asyncio
    import time

    from test_pipeline import OneJob

    from afc_cli.pipeline import run_job

    one = OneJob(
        afc,
        [
            {"key": "a", "prompt": "p", "params": {"fail": ["server"]}},
            {"key": "b", "prompt": "p"},
        ],
    )
    ledger = one.ledger
    [job_a, job_b] = [job.job_id for job in one.manifest.jobs]
    sleeps: list[float] = []

    async def main():
        loop = asyncio.get_running_loop()
        blocker = loop.create_future()

        def settle() -> None:  # the other call comes back free: its reservation goes
            with ledger.tx():
                ledger.db.execute(
                    "UPDATE attempts SET status = 'failed', cost_micros = 0 WHERE job_id = ?",
                    (job_b,),
                )
            blocker.set_result("failed")

        async def sleep(seconds: float) -> None:
            sleeps.append(seconds)
            if len(sleeps) == 1:  # during the backoff, b's call takes the whole cap
                with ledger.tx():
                    ledger.db.execute(
                        "INSERT INTO attempts (job_id, number, chain_index, provider, model,"
                        " status, owner, started_at, run_id, reserved_micros)"
                        " VALUES (?, 1, 0, 'local', 'm1', 'started', ?, ?, 'r1', 50000)",
                        (job_b, ledger.owner, time.time()),
                    )
                ctx.tasks[job_b] = blocker
                ctx.protected.add(job_b)
                loop.call_later(0.05, settle)

        ctx = one.context(cap_micros=50_000, run_id="r1", sleep=sleep)
        return await run_job(ctx, job_a)

    status = one.run(main)
    assert status == "succeeded"
    assert len(sleeps) == 1, sleeps  # the backoff after attempt 1, once
