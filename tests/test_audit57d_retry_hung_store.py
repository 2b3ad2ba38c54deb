"""Outside audit 57d: 'afc retry' naming succeeded jobs looks for each one's output in
storage (up to ``ops.LOOKED_FOR``, one HEAD each) before it refuses them. A bucket that does not
answer was asked once a job, each HEAD waiting out the S3 client's timeouts (10 s to connect,
120 s to read): five succeeded jobs named against a hung store kept the person at a silent
prompt for up to eleven minutes before the refusal. A store that failed to answer is now not
asked again by that command: one wait at most, the rest said as before (stored)."""

from __future__ import annotations

import time

from conftest import jobs, manifest
from s3fake import Fault
from test_s3 import attempts, submit


def _heads(s3) -> int:
    return sum(1 for method, path in s3.plan.seen if method == "HEAD" and "/films/b1/" in path)


def test_a_store_that_does_not_answer_is_asked_once_by_a_retry(afc, s3):
    """Five succeeded jobs, then the store stops answering their HEADs: the first is held
    unanswered (as a hung store holds it, until the client's read timeout), then its
    connection closed; the retry's other four HEADs were each sent into the same store and,
    hung, waited as long. Now the retry asks once and refuses all five (exit 2, nothing
    changed, nothing rendered), each said stored as before."""
    afc.write_manifest(manifest(jobs(5)))
    assert submit(afc, s3).returncode == 0
    s3.plan.clear()
    s3.plan.add(Fault("HEAD", r"/films/b1/", "stall", -1))
    keys = [f"shot-{i:03d}" for i in range(1, 6)]
    proc = afc.popen("retry", *keys, "--batch", "b1")
    try:
        deadline = time.time() + 60
        while not _heads(s3) and time.time() < deadline:
            time.sleep(0.02)
        assert _heads(s3) == 1, "the retry sent no HEAD"
        s3.plan.release()  # the held HEAD's connection closes unanswered; so would the rest
        code = proc.wait(timeout=60)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 2, err
    assert err.count("its output is stored") == 5, err
    assert _heads(s3) == 1, f"{_heads(s3)} HEADs sent to a store that did not answer"
    assert afc.rows("SELECT DISTINCT status FROM jobs") == [("succeeded",)]
    assert attempts(afc) == 5
