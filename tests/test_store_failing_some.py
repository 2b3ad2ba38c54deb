"""A store that fails some requests, not all: one job's key answers 503 SlowDown every time,
the batch's other keys answer. That job's own tries give up (it waits for the next run,
counted), but the store is not down: the batch's other jobs go on at once. Before, any job
that gave up opened the batch's outage (``pipeline._Outage``), holding every later probe of
the batch for a 30 s pause and one look: a store failing 30% of its requests (2.7% of jobs
giving up) held a 10,000-job batch some 270 times. Now an outage opens only where no call of
the storage answered within a pause's time (``RunContext.answered``). Through the real afc
command: the fake Replicate (tests/fakeproviders.py), moto's S3 server behind the fault proxy
of tests/s3fake.py."""

from __future__ import annotations

from s3fake import Fault
from test_output_spill import write

JOBS = 8


def test_one_key_failing_holds_back_no_other_job(afc, fake, s3):
    write(afc, [f"small {i}" for i in range(JOBS)])
    # the first job's key fails every time, after the other jobs' calls have answered
    s3.plan.add(Fault("*", r"/films/.*j0\b", "slowdown", -1))
    result = afc("submit", "manifest.yaml", "--storage", s3.url, "--concurrency", "2")
    assert result.returncode == 1, result.stderr  # j0 waits for the next run
    assert "Traceback" not in result.stderr
    rows = afc.rows("SELECT key, status, store_failures FROM jobs ORDER BY key")
    assert rows[0] == ("j0", "waiting", 1), rows
    assert {status for _, status, _ in rows[1:]} == {"succeeded"}, rows
    held = afc.rows("SELECT key FROM jobs WHERE waiting_reason LIKE '%one look%'")
    assert held == [], held
    # none of the others was ever held for a look at the storage (was: every job that came
    # to its probe after j0 gave up, for 30 s)
    said = afc.rows(
        "SELECT DISTINCT j.key FROM events e JOIN jobs j ON j.id = e.job_id"
        " WHERE e.kind = 'waiting' AND j.key != 'j0'"
    )
    assert said == [], said
    assert fake.counts["replicate_submit"] == JOBS - 1
