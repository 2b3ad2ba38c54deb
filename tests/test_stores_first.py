"""A run tries the uploads an earlier run's failing storage left before it pays for another
render of their batch (``pipeline.note_stores_first``, ``_stores_first``).

A role without s3:PutObject on the prefix answers the bucket's HEAD and each key's, and refuses
every upload (403 AccessDenied). Within a run, the first refusal holds the batch's later
renders (tests/test_audit32g_write_denied.py). But each cron run began with its first probes
beside the uploads the last run left: they found nothing stored and paid for renders before
the first upload was refused again. 20 jobs at 4 wide: 8, 12, 16 and 20 renders paid in four
runs, the whole batch rendered into the spool while nothing could be stored."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from conftest import jobs, ledger_count, manifest
from s3fake import Fault
from test_s3 import submit

from afc_cli.pipeline import _store_ended, _stores_first, note_stores_first


def test_later_runs_pay_for_no_render_while_uploads_are_refused(afc, s3, ledger_url):  # noqa: F811
    afc.write_manifest(manifest(jobs(20, latency_s=0.3)))
    s3.plan.add(Fault("PUT", r"shot-", "403", -1))  # the policy lost s3:PutObject

    def paid() -> int:
        return ledger_count(afc, ledger_url, "SELECT COUNT(*) FROM attempts")

    first = submit(afc, s3, "--concurrency", "4", "--ledger", ledger_url)
    assert first.returncode == 1, first.stderr
    assert "Traceback" not in first.stderr
    spooled = paid()
    assert 4 <= spooled < 20, spooled  # the run's first renders, before its first refusal
    for _ in range(2):  # the next cron runs: their uploads are refused, and no render is paid
        again = afc("resume", "--concurrency", "4", "--ledger", ledger_url)
        assert again.returncode == 1, again.stderr
        assert "Traceback" not in again.stderr
        assert paid() == spooled
    held = ledger_count(
        afc,
        ledger_url,
        "SELECT COUNT(*) FROM jobs WHERE step = 'probe' AND status = 'waiting'"
        " AND waiting_reason LIKE '%AccessDenied%no other job of batch b1 is rendered%'",
    )
    assert held == 20 - spooled
    s3.plan.clear()  # the policy mended
    last = afc("resume", "--concurrency", "4", "--ledger", ledger_url)
    assert last.returncode == 0, last.stderr
    assert ledger_count(afc, ledger_url, "SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'")
    assert paid() == 20, "each job rendered once"


def _ctx(retry: list[tuple[str, str]]) -> SimpleNamespace:
    # as ``Ledger.stores_to_retry``: in the jobs' order
    ledger = SimpleNamespace(
        stores_to_retry=lambda job_ids: [r for job_id in job_ids for r in retry if r[0] == job_id]
    )
    return SimpleNamespace(
        ledger=ledger,
        stores_first={},
        first_store={},
        tasks={},
        storing_for={},
        stopping=asyncio.Event(),
    )


def test_uploads_left_start_first_whatever_their_place():
    ctx = _ctx([("j7", "b1"), ("j3", "b2")])
    order = note_stores_first(ctx, ["j1", "j3", "j5", "j7", "j9"])
    assert order == ["j3", "j7", "j1", "j5", "j9"]
    assert ctx.stores_first == {"b1": {"j7"}, "b2": {"j3"}}


@pytest.mark.parametrize("claimed", [True, False])
def test_a_probe_waits_for_the_first_store_of_its_batch_alone(claimed):
    async def scenario() -> list[str]:
        ctx = _ctx([("s1", "b1"), ("s2", "b1")])
        note_stores_first(ctx, ["s1", "s2", "p1"])
        said: list[str] = []
        forever = asyncio.get_running_loop().create_future()
        for job_id in ("s1", "s2"):
            ctx.tasks[job_id] = asyncio.ensure_future(asyncio.wait({forever}))
            if claimed:
                ctx.storing_for[job_id] = "b1"

        async def probe(job_id: str, batch: str) -> None:
            await _stores_first(ctx, {"id": job_id, "batch": batch})
            said.append(job_id)

        waiting = asyncio.ensure_future(probe("p1", "b1"))
        other = asyncio.ensure_future(probe("p2", "b2"))  # another batch: no wait
        await asyncio.sleep(0.01)
        said.append("store ended")
        _store_ended(ctx, "s2", "b1")
        await asyncio.wait_for(asyncio.gather(waiting, other), 5)
        forever.cancel()
        return said

    said = asyncio.run(scenario())
    assert said.index("p2") < said.index("store ended")  # another batch: no wait
    if claimed:
        # the probe went on only once a store of its batch had ended
        assert said.index("p1") > said.index("store ended"), said
    else:
        # none of them claimed by this run (another process holds them): nothing to wait for
        assert said.index("p1") < said.index("store ended"), said


def test_a_stopping_run_ends_the_wait():
    async def scenario() -> bool:
        ctx = _ctx([("s1", "b1")])
        note_stores_first(ctx, ["s1", "p1"])
        forever = asyncio.get_running_loop().create_future()
        ctx.tasks["s1"] = asyncio.ensure_future(asyncio.wait({forever}))
        ctx.storing_for["s1"] = "b1"
        waiting = asyncio.ensure_future(_stores_first(ctx, {"id": "p1", "batch": "b1"}))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        ctx.stopping.set()  # a signal: the store goes on, the probe waits for it no more
        await asyncio.wait_for(waiting, 5)
        forever.cancel()
        return True

    assert asyncio.run(scenario())
