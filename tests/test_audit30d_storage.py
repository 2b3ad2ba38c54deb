"""Outside audit 30d, storage: an S3-compatible store (moto's server behind the fault proxy of
tests/s3fake.py) and file:// folders that misbehave during a paid batch, through the real afc
command."""

from __future__ import annotations

import pytest
from conftest import jobs, manifest
from moto.server import ThreadedMotoServer
from s3fake import Fault, FaultPlan, ProxiedBucket


@pytest.fixture(scope="module")
def moto_server():
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    yield server.get_host_and_port()
    server.stop()


class LaggingPlan(FaultPlan):
    """A store not yet consistent after a write: once a PUT under films/ has been stored, the
    next ``lag`` HEADs and GETs under films/ answer 404 NoSuchKey."""

    lag = 0

    def answered(self, method: str, path: str) -> None:
        if method == "PUT" and "/films/" in path and self.lag:
            self.add(
                Fault("HEAD", r"/films/", "404", self.lag),
                Fault("GET", r"/films/", "404", self.lag),
            )


@pytest.fixture
def s3(moto_server, afc):
    plan = LaggingPlan()
    ctx = ProxiedBucket(moto_server, afc, plan, "renders")
    yield ctx
    plan.release()
    ctx.proxy.shutdown()


def attempts(afc) -> list[tuple]:
    return afc.rows("SELECT number, status FROM attempts")


def spooled(afc) -> int:
    return len(list((afc.cwd / "afc.db-spool").glob("*.spool")))


def test_an_upload_the_store_shows_a_moment_late_is_not_a_failed_job(afc, s3):
    """The store took the PUT (200) and its next HEAD says 404: the read-back is tried again
    under the storage policy, and the job succeeds in the same run, one render."""
    s3.plan.lag = 1
    afc.write_manifest(manifest(jobs(1)))
    result = afc.json("submit", "manifest.yaml", "--storage", s3.url)
    assert result["counts"] == {"succeeded": 1}, afc.rows("SELECT error_message FROM jobs")
    assert attempts(afc) == [(1, "succeeded")]
    assert ("HEAD", "404") in {(m, k) for m, _, k in s3.plan.injected}


def test_an_upload_the_store_does_not_show_all_run_waits_and_is_never_rendered_again(afc, s3):
    """Still 404 after the policy's tries: the job waits at verify with its spool file (exit 1,
    not a failed job a person must retry), and the next run finishes it without a render."""
    s3.plan.lag = 50
    afc.write_manifest(manifest(jobs(1)))
    result = afc.json("submit", "manifest.yaml", "--storage", s3.url, expect=1)
    job = result["jobs"][0]
    assert (job["status"], job["step"]) == ("waiting", "verify"), job
    assert "not there" in job["waiting"] and "never the render" in job["waiting"]
    assert spooled(afc) == 1
    s3.plan.clear()
    s3.plan.lag = 0
    assert afc.json("resume")["counts"] == {"succeeded": 1}
    assert attempts(afc) == [(1, "succeeded")], "no second render"
    assert spooled(afc) == 0
