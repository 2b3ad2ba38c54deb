"""The calls a turn of the run loop makes to the file helper go down its pipe in one write."""

from __future__ import annotations

import asyncio
import os

from afc_cli.offload import FileWorker


def test_calls_made_in_one_turn_share_one_write_and_each_gets_its_answer():
    async def main():
        worker = FileWorker()
        await worker.start()
        writes = []
        real = worker._pipe.writelines
        worker._pipe.writelines = lambda frames: (writes.append(len(frames)), real(frames))
        try:
            together = await asyncio.gather(*(worker.call(pow, 3, n) for n in range(40)))
            alone = await worker.call(os.getpid)
        finally:
            await worker.close()
        return writes, together, alone

    writes, together, alone = asyncio.run(main())
    assert together == [3**n for n in range(40)]
    assert alone != os.getpid()
    assert writes == [80, 2]  # 40 calls (a header and a frame each) in one write, then one
