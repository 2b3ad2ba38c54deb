"""The store step of a job whose spool file is gone, its key holding another job's object
(audit 54a, mutation audit). ``pipeline.store`` takes an object it finds there as the job's
own only when ``ownership`` says so; without that clause no test failed, and such a job
succeeded with the other job's object as its output (its own paid render lost, nothing
said)."""

from __future__ import annotations

import hashlib
import uuid

from conftest import jobs, manifest
from s3fake import Fault


def test_a_job_without_its_spool_file_never_takes_another_jobs_object_as_its_own(afc, s3):
    afc.write_manifest(manifest(jobs(1), storage=s3.url))
    # the render is paid for and spooled; its upload fails: it waits at its store step
    s3.plan.add(Fault("PUT", r"/films/", "500", -1))
    assert afc("submit", "manifest.yaml").returncode == 1
    s3.plan.clear()
    [(job_id, step)] = afc.rows("SELECT id, step FROM jobs")
    assert step == "store"
    spooled = afc.cwd / "afc.db-spool" / f"{job_id}.spool"
    spooled.unlink()  # the spool file lost (a disk replaced, a cleanup by hand)
    # meanwhile another job's output lands at the key (another ledger's run, say)
    [(output_key,)] = afc.rows("SELECT output_key FROM jobs")
    key = f"films/{output_key}"
    body = b"\x89PNG another job's render"
    other = {
        "afc-job-id": str(uuid.uuid4()),
        "afc-key": "shot-001",
        "afc-batch": "elsewhere",
        "afc-request-hash": "ab" * 32,
        "afc-provider": "local",
        "afc-model": "m",
        "afc-attempt": "1",
        "afc-size": str(len(body)),
        "afc-sha256": hashlib.sha256(body).hexdigest(),
    }
    s3.client.put_object(Bucket=s3.bucket, Key=key, Body=body, Metadata=other)

    resumed = afc("resume")
    assert resumed.returncode == 1, resumed.stderr
    [(status, code, sha)] = afc.rows("SELECT status, error_code, output_sha256 FROM jobs")
    assert status != "succeeded", "the job succeeded with another job's object as its output"
    assert (status, code) == ("dead", "SPOOL_MISSING")
    assert afc.rows("SELECT status FROM attempts") == [("succeeded",)]
    stored = s3.client.get_object(Bucket=s3.bucket, Key=key)["Body"].read()
    assert stored == body, "afc never overwrites an object it did not write"
