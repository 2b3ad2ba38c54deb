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


def test_status_counts_the_jobs_it_leaves_out_without_comparing_every_pair(monkeypatch, tmp_path):
    """``afc status`` lists the jobs that need attention and counts the others ("not listed:
    8574 succeeded"): it found them by looking each row up in the list shown, comparing it
    with every row there, so the time grew with the product of the two. On the finished
    10,000-job ledger of bench/soak.py (1,426 failed) that took 1.1 s of the command's 1.5;
    half the jobs failed would be 25 million row comparisons. Here, counted."""
    from typer.testing import CliRunner

    from afc_cli import listing
    from afc_cli.cli import app

    compared = [0]

    class Row(dict):
        def __eq__(self, other):
            compared[0] += 1
            return dict.__eq__(self, other)

        __hash__ = None

    rows = [
        Row(
            key=f"k{i:03d}",
            batch="b1",
            status="failed" if i % 5 == 0 else "succeeded",
            step="render" if i % 5 == 0 else "done",
            output_key=f"b1/k{i:03d}.png",
            attempts=1,
            cost="0.040000",
            unpriced_attempts=0,
            waiting=None,
            error=None,
            reason="server: boom" if i % 5 == 0 else None,
        )
        for i in range(400)
    ]
    view = {
        "jobs": rows,
        "counts": {"succeeded": 320, "failed": 80},
        "attention": True,
        "batches": ["b1"],
    }
    monkeypatch.setattr(listing, "status_view", lambda *a, **k: view)
    result = CliRunner().invoke(app, ["status", "--ledger", str(tmp_path / "afc.db")])
    assert result.exit_code == 0, result.output
    assert "not listed: 320 succeeded" in result.output
    assert result.output.count("server: boom") == 80
    assert compared[0] < len(rows)  # (25,600 before: each of 320 rows against 80)
