"""Outside audit 60a: jobs sending one stored output as their reference image waited for one
read of it (``inputs.SharedReads``), and when that read failed, each read it again in turn.

A style frame sent by 8 shots at 8 wide, its storage hanging: each GET ends at its read
timeout (120 s on S3), and the shots, queued on one lock, read one after the other: the
last one's render waited 8 x 120 s, 16 minutes, holding its --concurrency slot, where they
had read side by side (2 minutes) before the reads were shared. Now the jobs that asked
while the read was in flight share its storage failure: one read, one timeout; the next job
to ask reads again (a failure is not kept)."""

from __future__ import annotations

import threading

import pytest

from afc_cli.errors import StorageError
from afc_cli.inputs import InputProblem, SharedReads


def _asking_at_once(shared: SharedReads, key: tuple, reads: list, fail, n: int = 8) -> list:
    gate = threading.Event()
    asked = threading.Barrier(n + 1)

    def read() -> bytes:
        number = len(reads)
        reads.append(1)
        gate.wait(10)
        return fail(number)

    got: list = []

    def job() -> None:
        asked.wait(10)
        try:
            got.append(shared.fetch(key, read))
        except Exception as exc:  # noqa: BLE001 - what each job met
            got.append(exc)

    threads = [threading.Thread(target=job) for _ in range(n)]
    for thread in threads:
        thread.start()
    asked.wait(10)
    # every job asks while the first read is in flight (they wait for it on its lock)
    for _ in range(1000):
        if reads and len(shared._reading) == 1:
            break
        threading.Event().wait(0.001)
    threading.Event().wait(0.05)
    gate.set()
    for thread in threads:
        thread.join(10)
    return got


def test_jobs_asking_while_a_read_fails_share_its_storage_failure():
    shared = SharedReads(limit=100)
    reads: list = []

    def timed_out(number: int) -> bytes:
        raise StorageError("cannot read s3://b/frame.png: read timeout", retryable=True)

    got = _asking_at_once(shared, ("s", "frame", "h"), reads, timed_out)
    assert len(got) == 8 and all(isinstance(exc, StorageError) for exc in got), got
    assert len(reads) == 1, f"{len(reads)} reads one after the other, each to its timeout"
    # not kept: the next job reads again
    assert shared.fetch(("s", "frame", "h"), lambda: b"x") == b"x"


def test_a_problem_naming_one_job_is_not_said_of_the_others():
    # an input changed in storage is said with the job's own key and the command to retry
    # it: the jobs that waited read for themselves, side by side
    shared = SharedReads(limit=100)
    reads: list = []

    def changed(number: int) -> bytes:
        raise InputProblem(f"changed: 'afc retry shot-{number}'")

    got = _asking_at_once(shared, ("s", "frame", "h"), reads, changed, n=4)
    assert len(got) == 4 and all(isinstance(exc, InputProblem) for exc in got), got
    assert len({str(exc) for exc in got}) == len(got) == len(reads)


@pytest.mark.parametrize("n", [1, 8])
def test_one_read_for_many_that_succeeds(n):
    shared = SharedReads(limit=100)
    reads: list = []
    got = _asking_at_once(shared, ("s", "frame", "h"), reads, lambda number: b"y" * 10, n=n)
    assert got == [b"y" * 10] * n and len(reads) == 1
