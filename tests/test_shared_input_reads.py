"""A stored output that many jobs send as their reference image is read from storage once per
run, not once per job (``inputs.SharedReads``).

A style frame sent by every shot of a batch was read from S3 by each shot's attempt: 30 shots,
30 GETs of the same object; a 10,000-shot batch on a 5 MB frame moved some 50 GB, paid for as
S3's transfer out, and waited for by each call. The bytes kept are the ones checked against the
SHA-256 the frame was verified with, so every shot sends what its request names."""

from __future__ import annotations

import threading

from conftest import manifest
from test_s3 import submit

from afc_cli.inputs import SharedReads


def _frame_and_shots(n: int) -> dict:
    return manifest(
        [{"key": "frame", "prompt": "the style frame"}]
        + [
            {
                "key": f"shot-{i:03d}",
                "prompt": f"shot {i}",
                "needs": ["frame"],
                "inputs": [{"job": "frame"}],
            }
            for i in range(1, n + 1)
        ]
    )


def test_a_frame_sent_by_30_shots_is_read_once(afc, s3):  # noqa: F811
    afc.write_manifest(_frame_and_shots(30))
    done = submit(afc, s3, "--concurrency", "8")
    assert done.returncode == 0, done.stderr
    assert afc.rows("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'")[0][0] == 31
    [(frame_key,)] = afc.rows("SELECT output_key FROM jobs WHERE key = 'frame'")
    reads = [path for method, path in s3.plan.seen if method == "GET" and path.endswith(frame_key)]
    assert len(reads) == 1, reads
    # and each shot's attempt records the frame's verified bytes as its input
    [(verified,)] = afc.rows("SELECT output_sha256 FROM jobs WHERE key = 'frame'")
    recorded = afc.rows("SELECT inputs_json FROM attempts WHERE inputs_json LIKE '%job:frame%'")
    assert len(recorded) == 30 and all(verified in row for (row,) in recorded)


def test_one_read_for_many_asking_at_once_and_none_kept_of_a_failed_read():
    shared = SharedReads(limit=100)
    reads = []
    gate = threading.Event()

    def read() -> bytes:
        reads.append(1)
        gate.wait(5)
        return b"x" * 10

    got: list[bytes] = []
    threads = [
        threading.Thread(target=lambda: got.append(shared.fetch(("s", "k", "h"), read)))
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    gate.set()
    for thread in threads:
        thread.join(5)
    assert got == [b"x" * 10] * 8 and len(reads) == 1

    def broken() -> bytes:
        raise OSError("unreadable")

    for _ in range(2):  # a failed read keeps nothing: the next asks again
        try:
            shared.fetch(("s", "other", "h"), broken)
        except OSError:
            pass
    assert shared.fetch(("s", "other", "h"), lambda: b"y") == b"y"


def test_kept_within_its_limit_the_least_recent_let_go():
    shared = SharedReads(limit=25)
    for name in ("a", "b"):
        shared.fetch(("s", name, "h"), lambda: b"1" * 10)
    shared.fetch(("s", "a", "h"), lambda: b"never read")  # a used again: b is the oldest
    shared.fetch(("s", "c", "h"), lambda: b"3" * 10)  # past 25 bytes: b let go
    assert shared.fetch(("s", "a", "h"), lambda: b"again") == b"1" * 10
    assert shared.fetch(("s", "b", "h"), lambda: b"read again") == b"read again"
    # one larger than the whole limit is sent, not kept
    assert shared.fetch(("s", "big", "h"), lambda: b"9" * 30) == b"9" * 30
    assert shared.fetch(("s", "big", "h"), lambda: b"again") == b"again"
