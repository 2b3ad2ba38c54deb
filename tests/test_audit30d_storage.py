"""Outside audit 30d, storage: an S3-compatible store (moto's server behind the fault proxy of
tests/s3fake.py) and file:// folders that misbehave during a paid batch, through the real afc
command."""

from __future__ import annotations

import pytest
from conftest import jobs, manifest, wait_for
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


class BucketGoneAfter(FaultPlan):
    """The bucket is deleted as the first job's upload arrives: from then on every request of
    the bucket (its own HEAD too) answers 404 NoSuchBucket, as S3 does (a HEAD with no body,
    so botocore reads it as a bare '404')."""

    gone = False

    def take(self, method: str, path: str):
        if method == "PUT" and path.endswith("/films/b1/shot-001.png") and not self.gone:
            self.gone = True
            self.add(Fault("*", r"^/renders-\d+(/|\?|$)", "nobucket", -1))
        return super().take(method, path)


PAID = "SELECT j.key FROM attempts a JOIN jobs j ON j.id = a.job_id"


@pytest.fixture
def s3_gone(moto_server, afc):
    plan = BucketGoneAfter()
    ctx = ProxiedBucket(moto_server, afc, plan, "renders")
    yield ctx
    plan.release()
    ctx.proxy.shutdown()


def test_a_bucket_deleted_mid_batch_stops_the_renders_its_outputs_could_not_be_stored(afc, s3_gone):
    """The bucket checked before the run goes away mid-batch. A probe's HEAD of a key in a
    bucket that is gone answers a bodiless 404, which reads as 'nothing stored here': every
    later job of a 10,000-shot batch was rendered and paid for, each one's upload refused
    NoSuchBucket, its bytes piling up in the spool. Once a store has given up, the next
    probe checks the storage again (as before the run) and, the bucket gone, waits without
    paying."""
    s3 = s3_gone
    afc.write_manifest(manifest(jobs(6)))
    release = afc.cwd / "release"
    (afc.cwd / "release.shot-001").touch()  # the others render once shot-001's store gave up
    proc = afc.popen(
        "submit",
        "manifest.yaml",
        "--storage",
        s3.url,
        "--concurrency",
        "1",
        env={"AFC_LOCAL_RELEASE": str(release)},
    )
    wait_for(afc, "SELECT COUNT(*) FROM jobs WHERE key = 'shot-001' AND status = 'waiting'", 1)
    release.touch()
    assert proc.wait(timeout=120) == 1
    result = afc.json("status")
    states = {j["key"]: (j["status"], j["step"]) for j in result["jobs"]}
    paid = sorted(key for (key,) in afc.rows(PAID))
    # shot-002 was probed before shot-001's upload (one render slot): paid, then kept
    assert paid == ["shot-001", "shot-002"], paid
    assert states["shot-001"] == states["shot-002"] == ("waiting", "store")
    for key in ("shot-003", "shot-004", "shot-005", "shot-006"):
        assert states[key] == ("waiting", "probe"), (key, states[key])
        job = next(j for j in result["jobs"] if j["key"] == key)
        assert "create bucket" in job["waiting"], job["waiting"]
        assert "before any render is paid" in job["waiting"]
    assert spooled(afc) == 2
    # the bucket back: the spooled renders are stored, the others rendered once each
    s3.plan.clear()
    assert afc.json("resume")["counts"] == {"succeeded": 6}
    assert sorted(key for (key,) in afc.rows(PAID)) == [f"shot-{i:03d}" for i in range(1, 7)]
    assert spooled(afc) == 0


def test_session_credentials_that_expired_mid_batch_are_named_with_their_fix(afc, s3):
    """Temporary credentials (an assumed role's AWS_SESSION_TOKEN, an SSO session: an hour by
    default) run out during an overnight batch. S3 answers a HEAD with a bare 400 (no body,
    no code) and a PUT with ExpiredToken: the jobs waited 'cannot read ...: 400 Bad Request',
    and the morning's resume was refused with the same words, naming neither the credentials
    nor what to do."""
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml", "--storage", s3.url, "--no-run").returncode == 0
    s3.plan.add(Fault("*", r"/", "expired", -1))
    refused = afc("resume")
    assert refused.returncode == 2, refused.stderr
    assert "400" in refused.stderr and "expired" in refused.stderr, refused.stderr
    assert "AWS_SESSION_TOKEN" in refused.stderr, refused.stderr
    # mid-run: the bucket's HEAD before the run passed, the keys' HEADs and PUTs do not
    s3.plan.clear()
    s3.plan.add(Fault("*", r"/films/", "expired", -1))
    result = afc.json("resume", expect=1)
    for job in result["jobs"]:
        assert (job["status"], job["step"]) == ("waiting", "probe"), job
        assert "AWS_SESSION_TOKEN" in job["waiting"], job["waiting"]
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(0,)], "nothing paid"


def test_a_role_without_list_bucket_is_told_which_permission_it_lacks(afc, s3):
    """A least-privilege role for one prefix (s3:GetObject and s3:PutObject on
    bucket/films/*, nothing on the bucket) is refused the bucket's HEAD before the run, 403:
    the message said to check that the bucket policy 'lets them read and write' the bucket,
    which that policy does; what it lacks (s3:ListBucket, without which S3 also answers a HEAD
    of a key not there 403) was said nowhere, in the message or the README."""
    afc.write_manifest(manifest(jobs(1)))
    s3.plan.add(Fault("HEAD", r"^/renders-\d+$", "403", -1))
    refused = afc("submit", "manifest.yaml", "--storage", s3.url)
    assert refused.returncode == 2, refused.stderr
    assert "403" in refused.stderr and "s3:ListBucket" in refused.stderr, refused.stderr
    assert not (afc.cwd / "afc.db").exists(), "nothing admitted"
