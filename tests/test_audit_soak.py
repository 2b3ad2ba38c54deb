"""Found by an overnight-sized batch (bench/soak.py): what only shows at scale, scaled down."""

from __future__ import annotations

import asyncio

import pytest
from conftest import manifest

MODELS = {"openai": "gpt-image-1", "replicate": "black-forest-labs/flux-1.1-pro"}
RATES = [{"provider": p, "model": m, "per_image": "0.04"} for p, m in MODELS.items()]


def started(afc) -> dict[tuple[str, int], tuple[float, float | None, str]]:
    """Each attempt's start, end and status, by (job key, attempt number)."""
    rows = afc.rows(
        "SELECT j.key, a.number, a.started_at, a.ended_at, a.status FROM attempts a"
        " JOIN jobs j ON j.id = a.job_id"
    )
    return {(key, n): (start, end, status) for key, n, start, end, status in rows}


@pytest.mark.parametrize(
    ("provider", "prompt"),
    [
        # a 409 (send it again): a backoff of 0.01-0.05 s, the slot given back
        ("openai", "conflict-once"),
        # a rendered (and billed) output out of reach past two rounds of fetching: the
        # pause before the next round gives the slot back
        ("replicate", "cdn-outage"),
    ],
)
def test_a_job_that_gave_its_slot_back_for_a_pause_is_not_queued_behind_the_batch(
    afc, fake, provider, prompt
):
    """A submit starts every job at once, each waiting for one of ``--concurrency`` slots. A
    job that gave its slot back for a moment (a backoff, a pause between fetches of a paid
    output) queued for it again behind every job of the batch not yet begun: at 10,000 jobs
    a 0.05 s backoff lasted minutes, and a paid output waited past the time its provider
    keeps it (then the job paid for a new render). It goes first now: here, one slot and
    eight jobs, its next round comes before the last job begins, not after it ends."""
    jobs = [{"key": "j0", "prompt": f"{prompt} j0"}]
    jobs += [{"key": f"j{i}", "prompt": f"plain j{i}"} for i in range(1, 8)]
    data = manifest(jobs, rates=RATES)
    data["defaults"]["chain"] = [
        {
            "provider": provider,
            "model": MODELS[provider],
            "attempts": 3,
            "backoff": {"base": 0.01, "cap": 0.05},
        }
    ]
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml", "--concurrency", "1")
    assert result.returncode == 0, result.stderr
    attempts = started(afc)
    last_begun = attempts[("j7", 1)][0]
    if prompt == "conflict-once":
        assert attempts[("j0", 1)][2] == "failed"
        assert attempts[("j0", 2)][0] < last_begun
    else:
        assert fake.counts["download_refused"] >= 3  # it went past two rounds of fetching
        start, end, status = attempts[("j0", 1)]
        assert status == "succeeded" and end < last_begun
    assert fake.counts.get("openai_billed", 0) + len(fake.predictions) == 8  # paid once each


def test_slots_serve_the_waiters_that_come_back_first():
    from afc_cli.pipeline import Slots

    async def go() -> list[str]:
        slots = Slots(1)
        order: list[str] = []
        await slots.acquire()

        async def take(name: str, first: bool) -> None:
            await slots.acquire(first=first)
            order.append(name)
            slots.release()

        tasks = [asyncio.create_task(take(f"new{i}", False)) for i in range(3)]
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(take("back", True)))
        await asyncio.sleep(0)
        slots.release()
        await asyncio.gather(*tasks)
        assert not slots.locked()
        return order

    assert asyncio.run(go()) == ["back", "new0", "new1", "new2"]


def test_a_slot_handed_to_a_waiter_cancelled_at_once_goes_to_the_next():
    from afc_cli.pipeline import Slots

    async def go() -> None:
        slots = Slots(1)
        await slots.acquire()
        gone = asyncio.create_task(slots.acquire())
        waiting = asyncio.create_task(slots.acquire())
        cancelled = asyncio.create_task(slots.acquire(first=True))
        await asyncio.sleep(0)
        cancelled.cancel()  # a waiter cancelled while it waits takes no slot
        await asyncio.sleep(0)
        slots.release()  # handed to ``gone``...
        gone.cancel()  # ...cancelled before it ran: the slot passes on
        await asyncio.wait_for(waiting, 1)
        slots.release()
        assert not slots.locked()
        await slots.acquire()
        assert slots.locked()

    asyncio.run(go())
