"""Outside audit 58a, storage: a store that answers 503 SlowDown to every request on the
batch's keys (its bucket's HEAD, the check before a run, passing: an outage that began as
the run did, or a store throttling its objects). Each job's probe spent the storage
policy's tries on its own HEAD: 3 requests a job, a 10,000-job resume sent 30,000 requests
over about 20 minutes to a store asking it to slow down, and counted a storage failure on
every job (five such runs dead-lettered the whole batch, never rendered). Now, once a job's
own storage work gave up so, the batch's later probes wait for one look at the storage
after a pause: it answers, and they go on in the run; it fails, and they wait for the next
run, uncounted. Through the real afc command: the fake Replicate (tests/fakeproviders.py),
moto's S3 server behind the fault proxy of tests/s3fake.py."""

from __future__ import annotations

from s3fake import Fault
from test_output_spill import write

from afc_cli.pipeline import STORE_TRIES

JOBS = 40
WIDE = 2


def _key_requests(s3) -> int:
    return sum("/films/" in path for _, path in s3.plan.seen)


def test_a_failing_storage_is_looked_at_once_not_by_every_jobs_probe(afc, fake, s3):
    write(afc, [f"small {i}" for i in range(JOBS)])
    assert afc("submit", "manifest.yaml", "--storage", s3.url, "--no-run").returncode == 0
    s3.plan.add(Fault("*", r"/films/", "slowdown", -1))
    result = afc("resume", "--concurrency", str(WIDE))
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    # the first probes' own tries, then one look after the pause (was: 3 a job, 120)
    assert _key_requests(s3) <= (WIDE + 1) * STORE_TRIES, _key_requests(s3)
    assert fake.counts["replicate_submit"] == 0, "nothing rendered that could not be stored"
    counted = afc.rows("SELECT count(*) FROM jobs WHERE store_failures = 1")
    held = afc.rows("SELECT count(*) FROM jobs WHERE store_failures = 0")
    assert counted == [(WIDE,)] and held == [(JOBS - WIDE,)], (counted, held)
    assert afc.rows("SELECT DISTINCT status, step FROM jobs") == [("waiting", "probe")]

    # The store answers again after the first probes' tries: the held jobs go on in the run
    s3.plan.clear()
    s3.plan.add(Fault("*", r"/films/", "slowdown", WIDE * STORE_TRIES))
    result = afc("resume", "--concurrency", str(WIDE))
    assert result.returncode == 1, result.stderr  # the first probes wait for the next run
    rows = afc.rows("SELECT status, count(*) FROM jobs GROUP BY status ORDER BY status")
    assert rows == [("succeeded", JOBS - WIDE), ("waiting", WIDE)], rows
    assert fake.counts["replicate_submit"] == JOBS - WIDE
    assert afc("resume").returncode == 0
    assert afc.rows("SELECT DISTINCT status FROM jobs") == [("succeeded",)]
    assert fake.counts["replicate_submit"] == JOBS, "each rendered once"
