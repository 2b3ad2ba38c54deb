"""Outside audit 26a: the machine's resources and slow or stuck peers during a long batch, run
through the real ``afc`` command against the suite's fakes (tests/fakeproviders.py,
tests/s3fake.py)."""

from __future__ import annotations

import os
import signal
import time

from conftest import manifest
from s3fake import Fault
from test_s3 import moto_server, s3  # noqa: F401 - the S3 fixtures

OPENAI = {"provider": "openai", "model": "gpt-image-1", "attempts": 2}
OPENAI_RATE = {"provider": "openai", "model": "gpt-image-1", "per_image": "0.04"}


def test_an_s3_endpoint_that_stalls_uploads_does_not_hold_a_stop_or_paid_bytes(afc, fake, s3):  # noqa: F811
    """An S3 endpoint that takes each upload and never answers (a hung store, a link gone
    quiet: botocore waits 120 s a try). Its uploads ran on the run loop's few threads
    (min(32, CPUs + 4)), the ones the ledger's commit sync before each paid call, the spool
    writes of paid bytes and name lookups use too: once stalled uploads held them all, the
    answers already in were not spooled nor recorded, and a SIGTERM (acted on after the
    ledger's sync) went unheard for minutes, past its grace, until cron's SIGKILL lost the
    renders held in memory, paid for again by the next run. The uploads hang on threads of
    their own: a SIGTERM stops the run within its grace, every paid call recorded at its cost
    with its bytes in the spool; the next run stores them, paying for none again."""
    count = 80
    threads = min(32, (os.cpu_count() or 1) + 4)  # the run loop's (run.RunThreads)
    afc.write_manifest(
        manifest(
            [{"key": f"shot-{i:03d}", "prompt": f"frame {i}"} for i in range(count)],
            defaults={"chain": [OPENAI]},
            rates=[OPENAI_RATE],
        )
    )
    s3.plan.add(Fault("PUT", r"/films/", "stall", -1))
    run = afc.popen(
        "submit", "manifest.yaml", "--storage", s3.url, "--concurrency", "10", "--grace", "1"
    )
    try:
        deadline = time.time() + 60
        while len(s3.plan.injected) < threads:  # every thread holds a stalled upload
            assert time.time() < deadline and run.poll() is None, "uploads never stalled"
            time.sleep(0.05)
        time.sleep(0.5)  # the calls in flight come back meanwhile
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=60) == 130, run.stderr.read()
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    paid = fake.counts["openai"]
    assert paid >= threads
    assert afc.rows("SELECT COUNT(*) FROM attempts WHERE status IN ('started', 'unknown')") == [
        (0,)
    ]
    assert afc.rows(
        "SELECT COUNT(*) FROM attempts WHERE status = 'succeeded' AND cost_micros = 40000"
    ) == [(paid,)]
    spooled = list((afc.cwd / "afc.db-spool").glob("*.spool"))
    assert len(spooled) == paid

    s3.plan.clear()
    s3.plan.release()
    again = afc("resume", "--storage", s3.url)
    assert again.returncode == 0, again.stderr
    assert afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY 1") == [("succeeded", count)]
    assert fake.counts["openai"] == count  # nothing rendered twice
