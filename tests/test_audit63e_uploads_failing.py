"""Outside audit 63e, storage: a store that refuses every upload of the batch with a
retryable error (503 SlowDown on each PUT) while it answers every read (each probe's HEAD,
the bucket's HEAD). Before, the batch's probes went on paying: a storage call that answered
counted as the store answering (``RunContext.answered``), the probes' HEADs included, so no
outage was declared, and the bucket's check a failed store brings passed; every job was
rendered and paid for, its upload refused in turn (8 jobs 2 wide: 8 renders paid, 24 PUTs,
all refused). Now a store's give-up is judged by its writes (``RunContext.wrote``): with no
upload of the store answered, the batch's later probes wait for a store of it to succeed in
this run, or for the next run, nothing paid; and the next run tries the waiting uploads first
and renders nothing while they fail. Through the real afc command: the local provider (its
``latency_s``), moto's S3 server behind the fault proxy of tests/s3fake.py."""

from __future__ import annotations

from conftest import manifest
from s3fake import Fault

from afc_cli.pipeline import STORE_TRIES

JOBS = 8


def _jobs() -> list[dict]:
    # the first job's render is quick, so its upload gives up (the storage policy's tries,
    # at most 1.5 s of backoff) while the next two render, 5 s each
    return [
        {
            "key": f"shot-{i:03d}",
            "prompt": f"prompt number {i}",
            "params": {"latency_s": 0.0 if i == 1 else 5.0},
        }
        for i in range(1, JOBS + 1)
    ]


def _puts(s3) -> int:
    return sum(1 for method, path in s3.plan.seen if method == "PUT" and "/films/" in path)


def _paid(afc) -> int:
    return afc.rows("SELECT count(*) FROM attempts WHERE cost_micros > 0")[0][0]


def test_uploads_refused_while_reads_answer_stop_the_batchs_renders(afc, s3):
    s3.plan.add(Fault("PUT", r"/films/", "slowdown", -1))
    afc.write_manifest(manifest(_jobs(), storage=s3.url))
    result = afc("submit", "manifest.yaml", "--concurrency", "2")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    # the three renders started before the first upload gave up (was: all 8)
    assert _paid(afc) == 3, afc.rows("SELECT key, status, step FROM jobs ORDER BY key")
    assert _puts(s3) == 3 * STORE_TRIES  # was 24
    rows = afc.rows("SELECT key, status, step, store_failures FROM jobs ORDER BY key")
    assert rows[:3] == [(f"shot-{i:03d}", "waiting", "store", 1) for i in (1, 2, 3)], rows
    # the others made no request of their own: waiting at their probe, uncounted
    assert rows[3:] == [(f"shot-{i:03d}", "waiting", "probe", 0) for i in range(4, 9)], rows
    reasons = afc.rows("SELECT DISTINCT waiting_reason FROM jobs WHERE step = 'probe'")
    assert all("uploads of batch b1 failed in this run" in r for (r,) in reasons), reasons

    # The next run, uploads still refused: it tries the waiting uploads first, renders
    # nothing (was: one look at a key's HEAD after 30 s, which answered, and the batch paid)
    seen = _puts(s3)
    result = afc("resume", "--concurrency", "2")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert _paid(afc) == 3, "no render paid while the batch's uploads are refused"
    assert _puts(s3) - seen == 3 * STORE_TRIES
    assert afc.rows("SELECT count(*) FROM jobs WHERE step = 'probe' AND store_failures = 0") == [
        (JOBS - 3,)
    ]

    # The store takes uploads again: every output stored, each job rendered once
    s3.plan.clear()
    result = afc("resume", "--concurrency", str(JOBS))
    assert result.returncode == 0, result.stderr
    assert afc.rows("SELECT DISTINCT status FROM jobs") == [("succeeded",)]
    assert _paid(afc) == JOBS, "each job rendered once"
