"""Outside audit 57d: a job that takes one of the minute's starts of its provider's
``per_minute`` limit and then makes no call (cancelled while it waited for the provider's
concurrency slot, refused by the budget, its disk low, the run stopping) gives that start back:
the run's count of the minute is the calls it started, as the ledger's is."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import manifest, wait_for


def test_a_job_cancelled_in_the_slot_wait_leaves_the_minute_to_the_next_job(afc):
    """``limits: {local: {concurrency: 1, per_minute: 2}}``, three jobs: a renders (held by
    the fake provider until the test lets it go), b and c wait for the slot. A person cancels
    b. As a ends, b took the slot and the minute's second start, found itself cancelled and
    made no call; c then waited for the rest of the minute (60 s) under a limit the run had
    used once. The start is given back now, and c renders as soon as a has ended."""
    release = str(afc.cwd / "release")
    jobs = [{"key": k, "prompt": k} for k in "abc"]
    afc.write_manifest(manifest(jobs, limits={"local": {"concurrency": 1, "per_minute": 2}}))
    run = afc.popen(
        "submit", "manifest.yaml", "--concurrency", "3", env={"AFC_LOCAL_RELEASE": release}
    )
    try:
        wait_for(afc, "SELECT COUNT(*) FROM attempts", 1)
        first = afc.rows("SELECT j.key FROM attempts a JOIN jobs j ON j.id = a.job_id")
        assert first == [("a",)]
        cancelled = afc("cancel", "b", "--batch", "b1")
        assert cancelled.returncode == 0, cancelled.stderr
        Path(release + ".a").write_text("")
        Path(release + ".c").write_text("")
        try:
            code = run.wait(timeout=30)
        except subprocess.TimeoutExpired:
            code = None
        assert code == 1, "c waited out a minute whose second start no call had used"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert sorted(afc.rows("SELECT key, status FROM jobs")) == [
        ("a", "succeeded"),
        ("b", "cancelled"),
        ("c", "succeeded"),
    ]
    # b made no call
    assert sorted(afc.rows("SELECT j.key FROM attempts a JOIN jobs j ON j.id = a.job_id")) == [
        ("a",),
        ("c",),
    ]


def test_a_start_no_call_used_is_given_back():
    """``ProviderLimit.unstart``: the start taken off the minute's count, the others kept."""
    import asyncio

    from afc_cli.pipeline import ProviderLimit

    async def main() -> None:
        now = [100.0]
        limit = ProviderLimit(per_minute=2, clock=lambda: now[0])
        first = await limit.acquire(asyncio.sleep)
        now[0] = 101.0
        second = await limit.acquire(asyncio.sleep)
        assert limit.full() == "2 a minute"
        limit.unstart(second)
        assert limit.full() is None
        assert list(limit.starts) == [first]
        limit.unstart(None)  # no start taken (a run's own adoption): nothing to give back
        assert list(limit.starts) == [first]

    asyncio.run(main())
