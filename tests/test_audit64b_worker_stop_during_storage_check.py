"""Outside audit 64b (interruptions): an ``afc worker`` stopped between its claim and its
first render, while the storage check before its round's loop (the bucket's HEAD) hangs.

The worker's signal handler only asks for a stop (``worker.Stop``), and that check ran in its
main thread: the SIGTERM went unheard for as long as the S3 client's timeouts and the storage
policy's tries allow (120 s a read, three tries), so a ``docker stop`` (10 s) or a
``systemctl stop`` (90 s) in that moment ended in a SIGKILL, its claimed jobs leased to a dead
process. Through the real command: moto's S3 server behind the fault proxy of
tests/s3fake.py, the bucket's HEAD held unanswered."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
from conftest import manifest
from s3fake import Fault


def test_a_sigterm_while_the_rounds_storage_check_hangs_stops_the_worker_and_frees_its_claim(
    afc, s3
):
    """Four jobs admitted; the worker claims them and checks the bucket, whose HEAD hangs.
    Before: the SIGTERM changed nothing until the HEAD ended (here never: the test's guard of
    30 s ran out; in life up to 6 minutes), the four jobs leased to the worker meanwhile. Now
    it stops at once: exit 130 (--until-idle: jobs left to run), the four jobs given back
    unleased, nothing paid; the next worker renders each once."""
    afc.write_manifest(
        manifest([{"key": f"k{i}", "prompt": f"p {i}"} for i in range(4)], storage=s3.url)
    )
    admitted = afc("submit", "manifest.yaml", "--no-run")
    assert admitted.returncode == 0, admitted.stderr
    seen = len(s3.plan.seen)
    s3.plan.add(Fault("HEAD", r".*", "stall", 1))
    proc = afc.popen("worker", "--until-idle", "--json", stdout=subprocess.PIPE)
    try:
        deadline = time.time() + 30
        while len(s3.plan.seen) <= seen and time.time() < deadline:
            time.sleep(0.02)
        assert s3.plan.seen[seen:] == [("HEAD", f"/{s3.bucket}")], s3.plan.seen[seen:]
        leased = afc.rows("SELECT count(*) FROM jobs WHERE lease_owner IS NOT NULL")
        assert leased == [(4,)], "the worker had not claimed its round's jobs"
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("afc worker did not stop on SIGTERM while its storage check hung")
        out, err = proc.communicate()
    finally:
        s3.plan.release()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 130, err
    assert "Traceback" not in err
    said = json.loads(out)
    assert said["claimed"] == 4 and said["finished"] == 0, said
    assert afc.rows(
        "SELECT count(*) FROM jobs WHERE status = 'queued' AND lease_owner IS NULL AND takeovers = 0"
    ) == [(4,)]
    assert afc.rows("SELECT count(*) FROM attempts") == [(0,)]

    again = afc("worker", "--until-idle")
    assert again.returncode == 0, again.stderr
    assert afc.rows("SELECT status, count(*) FROM jobs GROUP BY status") == [("succeeded", 4)]
    assert afc.rows("SELECT count(*) FROM attempts") == [(4,)]
