"""S3 storage end to end: moto's S3 server over real HTTP on 127.0.0.1, faults injected at the
wire by a proxy in front of it, afc run as a child process. No boto3 call is mocked."""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
import time
from pathlib import Path

import pytest
from conftest import jobs, manifest
from s3fake import Fault

from afc_cli.owner import machine_fingerprint

# host-a's spool hold (owner.host_lease): host:0:0 and this machine's fingerprint
HOST_A_HOLD = ":".join(filter(None, ["host-a:0:0", machine_fingerprint()]))


def submit(afc, s3, *args, env=None):
    return afc("submit", "manifest.yaml", "--storage", s3.url, *args, env=env)


def attempts(afc) -> int:
    return afc.rows("SELECT COUNT(*) FROM attempts")[0][0]


def test_objects_carry_metadata_and_a_verified_checksum(afc, s3):
    afc.write_manifest(manifest(jobs(3)))
    result = submit(afc, s3)
    assert result.returncode == 0, result.stderr
    for i in (1, 2, 3):
        head = s3.client.head_object(
            Bucket=s3.bucket, Key=f"films/b1/shot-{i:03d}.png", ChecksumMode="ENABLED"
        )
        meta = head["Metadata"]
        body = s3.client.get_object(Bucket=s3.bucket, Key=f"films/b1/shot-{i:03d}.png")
        data = body["Body"].read()
        assert data.startswith(b"\x89PNG")
        digest = hashlib.sha256(data)
        assert meta["afc-sha256"] == digest.hexdigest()
        assert head["ChecksumSHA256"] == base64.b64encode(digest.digest()).decode()
        assert meta["afc-key"] == f"shot-{i:03d}" and meta["afc-batch"] == "b1"
        job_id, request_hash = afc.rows(
            "SELECT id, request_hash FROM jobs WHERE key = ?", (f"shot-{i:03d}",)
        )[0]
        assert meta["afc-job-id"] == job_id and meta["afc-request-hash"] == request_hash
        assert meta["afc-provider"] == "local" and meta["afc-model"] == "m1"
        assert meta["afc-attempt"] == "1" and meta["afc-cost"] == "0.050000"
        assert head["ContentType"] == "image/png"
    # creates were conditional: every PUT carried If-None-Match
    assert list((afc.cwd / "afc.db-spool").glob("*.spool")) == []


def test_foreign_object_survives_and_its_job_conflicts(afc, s3):
    s3.client.put_object(Bucket=s3.bucket, Key="films/b1/shot-002.png", Body=b"not ours")
    afc.write_manifest(manifest(jobs(3)))
    result = submit(afc, s3)
    assert result.returncode == 1
    body = s3.client.get_object(Bucket=s3.bucket, Key="films/b1/shot-002.png")["Body"].read()
    assert body == b"not ours"
    story = afc.json("show", "shot-002")
    assert story["job"]["error"]["code"] == "OUTPUT_KEY_CONFLICT"
    assert story["attempts"] == []
    assert {j["status"] for j in afc.json("status")["jobs"] if j["key"] != "shot-002"} == {
        "succeeded"
    }


def test_a_key_taken_between_probe_and_store_is_never_overwritten(afc, s3):
    # the object appears after probe looked (a racing writer): the create-only PUT gets 412
    afc.write_manifest(manifest([{"key": "race", "prompt": "p"}]))
    release = afc.cwd / "release"  # the render returns once the racing writer has written
    proc = afc.popen(
        "submit", "manifest.yaml", "--storage", s3.url, env={"AFC_LOCAL_RELEASE": str(release)}
    )
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            if afc.rows("SELECT COUNT(*) FROM attempts")[0][0]:
                break
        except Exception:  # the ledger is still being created
            pass
        time.sleep(0.02)
    s3.client.put_object(Bucket=s3.bucket, Key="films/b1/race.png", Body=b"racing writer")
    release.touch()
    assert proc.wait(timeout=30) == 1
    body = s3.client.get_object(Bucket=s3.bucket, Key="films/b1/race.png")["Body"].read()
    assert body == b"racing writer"
    assert afc.json("show", "race")["job"]["error"]["code"] == "OUTPUT_KEY_CONFLICT"


def test_fresh_ledger_over_a_stored_bucket_makes_no_provider_call(afc, s3):
    afc.write_manifest(manifest(jobs(4)))
    assert submit(afc, s3).returncode == 0
    for suffix in ("", "-wal", "-shm"):
        (afc.cwd / f"afc.db{suffix}").unlink(missing_ok=True)
    log = afc.cwd / "calls.log"
    result = submit(afc, s3, "--json", env={"AFC_LOCAL_CALL_LOG": str(log)})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["counts"] == {"succeeded": 4}
    assert not log.exists(), "zero provider calls"
    assert attempts(afc) == 0
    report = afc.json("costs", "report")
    assert report["total"]["avoided_renders"] == 4
    assert report["total"]["avoided_cost"] == "0.200000"  # from the objects' metadata
    # a different body under the same key, on a fresh ledger, is a conflict, not an overwrite
    for suffix in ("", "-wal", "-shm"):
        (afc.cwd / f"afc.db{suffix}").unlink(missing_ok=True)
    data = manifest(jobs(4))
    data["jobs"][0]["prompt"] = "changed"
    afc.write_manifest(data)
    assert submit(afc, s3).returncode == 3  # an idempotency conflict, found in the bucket
    assert afc.json("show", "shot-001")["job"]["error"]["code"] == "IDEMPOTENCY_CONFLICT"
    assert attempts(afc) == 0


@pytest.mark.parametrize(
    "fault",
    [
        Fault("PUT", r"/films/", "slowdown", 2),
        Fault("PUT", r"/films/", "429", 2, retry_after="0"),
        Fault("PUT", r"/films/", "500", 2),
        Fault("PUT", r"/films/", "reset", 2),
        Fault("HEAD", r"/films/", "slowdown", 2),
    ],
    ids=["503-slowdown", "429-retry-after", "500", "reset", "head-503"],
)
def test_transient_faults_retry_the_upload_never_the_render(afc, s3, fault):
    afc.write_manifest(manifest(jobs(1)))
    s3.plan.add(fault)
    result = submit(afc, s3)
    assert result.returncode == 0, result.stderr
    assert len(s3.plan.injected) == 2
    assert attempts(afc) == 1, "the render was not repeated"
    s3.client.head_object(Bucket=s3.bucket, Key="films/b1/shot-001.png")


def test_retry_after_is_honoured(afc, s3, monkeypatch, tmp_path):
    """The storage policy waits what S3's Retry-After asks (not its own shorter jitter), then
    tries again. Run in this process through the policy itself (``pipeline._storage``) with
    the run's injectable sleep, so the test records the wait instead of sleeping it; the
    fault is S3's own 429 answer at the wire, read by boto3."""
    import asyncio
    from types import SimpleNamespace

    from afc_cli import pipeline, storage

    for name, value in afc.env.items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    s3.plan.add(Fault("PUT", r"/films/", "429", 1, retry_after="7"))
    target = storage.open(s3.url)
    source = tmp_path / "out.png"
    source.write_bytes(b"rendered")
    digest = hashlib.sha256(b"rendered").hexdigest()
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    ctx = SimpleNamespace(sleep=sleep, network=asyncio.to_thread, answered={})
    meta = {"job_id": "j1", "key": "shot-001", "sha256": digest, "size": 8}
    asyncio.run(
        pipeline._storage(ctx, target, target.put_if_absent, "b1/shot-001.png", source, meta)
    )
    puts = [t for t in s3.plan.seen if t[0] == "PUT"]
    assert len(puts) == 2, "one refused put, one accepted"
    assert waits == [7.0], "waited what Retry-After asked, once"
    stored = s3.client.get_object(Bucket=s3.bucket, Key="films/b1/shot-001.png")
    assert stored["Body"].read() == b"rendered"


def test_persistent_outage_waits_in_store_and_the_next_run_uploads(afc, s3):
    afc.write_manifest(manifest(jobs(2)))
    s3.plan.add(Fault("PUT", r"/films/", "slowdown", -1))
    result = afc.json("submit", "manifest.yaml", "--storage", s3.url, expect=1)
    assert {(j["status"], j["step"]) for j in result["jobs"]} == {("waiting", "store")}
    assert all("never the render" in j["waiting"] for j in result["jobs"])
    assert len(list((afc.cwd / "afc.db-spool").glob("*.spool"))) == 2, "spools intact"
    assert attempts(afc) == 2
    s3.plan.clear()
    resumed = afc.json("resume")
    assert resumed["counts"] == {"succeeded": 2}
    assert attempts(afc) == 2, "no render again"
    assert list((afc.cwd / "afc.db-spool").glob("*.spool")) == []


def test_an_outage_that_never_ends_is_dead_lettered_with_the_spool_kept(afc, s3):
    afc.write_manifest(manifest(jobs(1)))
    s3.plan.add(Fault("PUT", r"/films/", "500", -1))
    assert submit(afc, s3).returncode == 1
    for _ in range(4):
        afc("resume")
    story = afc.json("show", "shot-001")
    assert story["job"]["status"] == "dead"
    assert story["job"]["error"]["code"] == "STORE_FAILED"
    assert "safe in" in story["job"]["error"]["message"]
    assert attempts(afc) == 1
    assert len(list((afc.cwd / "afc.db-spool").glob("*.spool"))) == 1
    assert afc.json("queue", "stats")["dlq"] == 1


def test_client_errors_are_not_retried_and_name_the_fix(afc, s3):
    afc.write_manifest(manifest(jobs(1)))
    missing = afc("submit", "manifest.yaml", "--storage", "s3://no-such-bucket-here/x")
    assert missing.returncode == 2
    assert "no-such-bucket-here" in missing.stderr and "create bucket" in missing.stderr
    assert "Traceback" not in missing.stderr
    assert attempts(afc) == 0 if (afc.cwd / "afc.db").exists() else True


def _small_multipart(afc, monkeypatch) -> None:
    """This process's S3Storage on the test's S3 (the afc child's environment), with the
    multipart threshold at 6 MiB and 5 MiB parts, so a 13 MiB file goes up in three."""
    from afc_cli.storage import s3 as s3mod

    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", afc.env["AWS_ENDPOINT_URL_S3"])
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"):
        monkeypatch.setenv(name, afc.env[name])
    monkeypatch.setattr(s3mod, "MULTIPART_THRESHOLD", 6 * 1024 * 1024)
    monkeypatch.setattr(s3mod, "PART_SIZE", 5 * 1024 * 1024)


def test_multipart_upload_of_a_large_output(afc, s3, tmp_path, monkeypatch):
    """Outputs above the threshold go up in parts from the spool; verify checks the composite
    checksum; a failed multipart upload is aborted."""
    from afc_cli.storage import s3 as s3mod

    _small_multipart(afc, monkeypatch)
    source = tmp_path / "big.spool"
    data = bytes(range(256)) * (13 * 4096)  # 13 MiB: three parts
    source.write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    storage = s3mod.S3Storage(s3.url)
    meta = {"job_id": "j", "request_hash": "h", "sha256": sha, "size": len(data)}
    storage.put_if_absent("big/video.mp4", source, meta)
    head = s3.client.head_object(
        Bucket=s3.bucket, Key="films/big/video.mp4", ChecksumMode="ENABLED"
    )
    assert head["ContentLength"] == len(data)
    # real S3 reports the checksum of the parts' checksums ("...-3"); moto the whole object's
    composite = storage.expected_checksum(source)
    assert head["ChecksumSHA256"].split("-")[0] == composite.split("-")[0]
    assert storage.expected_checksum(source).endswith("-3")
    assert storage.verify("big/video.mp4", len(data), sha, source) is None
    assert storage.verify("big/video.mp4", len(data) + 1, sha, source) is not None
    with pytest.raises(s3mod.ObjectExists):
        storage.put_if_absent("big/video.mp4", source, meta)
    # a part that fails for good aborts the upload: nothing is left in progress
    s3.plan.add(Fault("PUT", r"partNumber=2", "500", -1))
    with pytest.raises(s3mod.StorageError):
        storage.put_if_absent("big/other.mp4", source, meta)
    assert s3.client.list_multipart_uploads(Bucket=s3.bucket).get("Uploads", []) == []


def test_an_upload_a_killed_run_left_in_progress_is_aborted(afc, s3, tmp_path, monkeypatch):
    """A run SIGKILLed in a multipart upload leaves its parts in the bucket, billed as stored
    bytes until aborted, and no run ever completed or aborted them. The next upload of that
    key aborts them once it completed; another key's upload in progress is left alone."""
    from afc_cli.storage import s3 as s3mod

    _small_multipart(afc, monkeypatch)
    left = {}
    for key in ("films/big/video.mp4", "films/big/video.mp4.other"):
        upload = s3.client.create_multipart_upload(Bucket=s3.bucket, Key=key)
        s3.client.upload_part(
            Bucket=s3.bucket,
            Key=key,
            UploadId=upload["UploadId"],
            PartNumber=1,
            Body=b"x" * (5 * 1024 * 1024),
        )
        left[key] = upload["UploadId"]
    data = bytes(range(256)) * (13 * 4096)
    source = tmp_path / "big.spool"
    source.write_bytes(data)
    meta = {"job_id": "j", "request_hash": "h", "sha256": hashlib.sha256(data).hexdigest()}
    s3mod.S3Storage(s3.url).put_if_absent("big/video.mp4", source, meta)
    in_progress = s3.client.list_multipart_uploads(Bucket=s3.bucket).get("Uploads", [])
    assert [(u["Key"], u["UploadId"]) for u in in_progress] == [
        ("films/big/video.mp4.other", left["films/big/video.mp4.other"])
    ]
    assert s3.client.head_object(Bucket=s3.bucket, Key="films/big/video.mp4")[
        "ContentLength"
    ] == len(data)


def _writers_of_one_key(afc, s3, tmp_path, monkeypatch):
    """Two S3Storage writers of one key (clients of their own) and their spool files, writer
    'a' held before its CompleteMultipartUpload until ``go`` (``at_complete`` set there)."""
    import threading

    from afc_cli.storage import s3 as s3mod

    _small_multipart(afc, monkeypatch)
    writers = {}
    for name, fill in (("a", b"a"), ("b", b"b")):
        data = fill * (7 * 1024 * 1024)
        source = tmp_path / f"{name}.spool"
        source.write_bytes(data)
        meta = {"job_id": name, "request_hash": "h", "sha256": hashlib.sha256(data).hexdigest()}
        writers[name] = (s3mod.S3Storage(s3.url), source, meta)
    at_complete, go = threading.Event(), threading.Event()
    client = writers["a"][0].client
    complete = client.complete_multipart_upload

    def held(**kwargs):
        at_complete.set()
        assert go.wait(30)
        return complete(**kwargs)

    monkeypatch.setattr(client, "complete_multipart_upload", held)
    outcome: dict[str, object] = {}

    def write_a():
        storage, source, meta = writers["a"]
        try:
            storage.put_if_absent("shared/video.mp4", source, meta)
            outcome["a"] = "stored"
        except Exception as exc:  # noqa: BLE001 - what the test looks at
            outcome["a"] = exc

    thread = threading.Thread(target=write_a)
    thread.start()
    assert at_complete.wait(30)
    return writers, go, thread, outcome


def test_an_upload_of_a_key_another_writer_started_leaves_that_upload_alone(
    afc, s3, tmp_path, monkeypatch
):
    """Two writers of one key at once (two batches whose output template gives them one key;
    a run that stalled past its lease storing its late result while the job's new owner
    stores another render, pipeline._found_own): the first to complete holds the key and the
    other finds it taken, as a create-only write does. Each upload began by aborting every
    upload of its key in progress, the live one ahead of it too: the writer ahead lost its
    upload (NoSuchUpload, a storage error never retried, its job left waiting at store) to
    the one behind it."""
    from afc_cli.storage import ObjectExists

    writers, go, thread, outcome = _writers_of_one_key(afc, s3, tmp_path, monkeypatch)
    storage, source, meta = writers["b"]
    client = storage.client
    upload_part = client.upload_part

    def a_completes_first(**kwargs):
        go.set()  # writer a, ahead, completes while b uploads its parts
        thread.join(30)
        return upload_part(**kwargs)

    monkeypatch.setattr(client, "upload_part", a_completes_first)
    with pytest.raises(ObjectExists):
        storage.put_if_absent("shared/video.mp4", source, meta)
    assert not thread.is_alive()
    assert outcome["a"] == "stored", outcome["a"]
    held = s3.client.head_object(Bucket=s3.bucket, Key="films/shared/video.mp4")
    assert held["Metadata"]["afc-job-id"] == "a"
    assert s3.client.list_multipart_uploads(Bucket=s3.bucket).get("Uploads", []) == []


def test_a_model_named_in_other_than_ascii_is_stored_and_read_back(afc, s3):
    """S3 takes ASCII metadata only: a model named 'démo-v1' made every store fail after the
    render was paid, five runs in a row (an outside audit). Its name is RFC 2047-encoded in
    the object's metadata and read back as written."""
    data = manifest(jobs(1))
    data["defaults"]["chain"][0]["model"] = "d\u00e9mo-v1"
    data["rates"] = [{"provider": "local", "model": "d\u00e9mo-v1", "per_image": "0.01"}]
    afc.write_manifest(data)
    result = submit(afc, s3)
    assert result.returncode == 0, result.stderr
    for suffix in ("", "-wal", "-shm"):
        (afc.cwd / f"afc.db{suffix}").unlink(missing_ok=True)
    assert submit(afc, s3).returncode == 0
    assert attempts(afc) == 0  # found stored, its metadata read
    [row] = afc.json("outputs")["outputs"]
    assert row["model"] == "local/d\u00e9mo-v1", row


def _store_failed_on_host_a(afc, s3) -> Path:
    """One job rendered by a submit on host-a whose upload failed (S3 answered 500): it waits
    at its store step, its paid output in the spool file returned (playing host-a's disk)."""
    afc.write_manifest(manifest(jobs(1), storage=s3.url))
    s3.plan.add(Fault("PUT", r"/films/", "500", -1))
    first = afc("submit", "manifest.yaml", env={"AFC_HOST_ID": "host-a"})
    assert first.returncode == 1, first.stderr
    s3.plan.clear()
    assert afc.rows("SELECT status, step FROM jobs") == [("waiting", "store")]
    job_id = afc.rows("SELECT id FROM jobs")[0][0]
    return afc.cwd / "afc.db-spool" / f"{job_id}.spool"


def test_a_job_whose_spool_is_on_another_host_names_that_host(afc, s3):
    """Found by bench/chaos.py --postgres: a job spooled on one host whose upload failed (it
    waited at its store step), met by a worker on another host, was dead-lettered
    SPOOL_MISSING with a message that its spool file 'is gone', while it sat in the first
    host's spool. (One machine here: the spool file is moved away to play the other host.)"""
    spool = _store_failed_on_host_a(afc, s3)
    kept = spool.read_bytes()
    spool.unlink()  # it is on host-a, not here
    # host-a kept the job leased to itself for a lease (the test below); host-a never came back
    with sqlite3.connect(afc.cwd / "afc.db") as db:
        db.execute("UPDATE jobs SET lease_expires = 0")
    db.close()
    assert afc("resume", env={"AFC_HOST_ID": "host-b"}).returncode == 1
    [(status, code, message)] = afc.rows("SELECT status, error_code, error_message FROM jobs")
    assert (status, code) == ("dead", "SPOOL_MISSING")
    assert "spooled on host host-a" in message and "not on this host (host-b)" in message
    assert "is gone" not in message
    # the remedy it names: the file put back, a retry stores it and pays for nothing
    spool.write_bytes(kept)
    assert afc("retry", "shot-001").returncode == 0
    assert afc("resume", env={"AFC_HOST_ID": "host-b"}).returncode == 0
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(1,)]
    stored = s3.client.get_object(Bucket=s3.bucket, Key="films/b1/shot-001.png")["Body"].read()
    assert stored == kept


def test_a_job_waiting_to_store_stays_with_the_host_whose_spool_holds_its_output(afc, s3):
    """A store that failed (an S3 outage) left the job waiting at its store step, free for any
    run: on several machines the next to meet it was often a worker on another host, which
    has no spool file and dead-lettered it SPOOL_MISSING (a person had to copy the file back).
    The job now stays leased to the host that spooled it for a lease: another host leaves it
    alone meanwhile, and any run on that host takes it at once (no takeover counted) and stores
    it without paying again."""
    spool = _store_failed_on_host_a(afc, s3)
    [(status, step, holder, reason)] = afc.rows(
        "SELECT status, step, lease_owner, waiting_reason FROM jobs"
    )
    assert (status, step, holder) == ("waiting", "store", HOST_A_HOLD)
    assert "a run on host host-a, whose spool holds the output" in reason
    kept = spool.read_bytes()
    spool.rename(spool.with_suffix(".away"))  # host-b's disk has no such file
    other = afc("resume", env={"AFC_HOST_ID": "host-b"})
    assert other.returncode == 1, other.stderr  # a job of its scope still waits
    assert "on host host-a, whose spool holds the output" in other.stderr
    assert afc.rows("SELECT status, step, lease_owner, error_code FROM jobs") == [
        ("waiting", "store", HOST_A_HOLD, None)
    ]
    spool.with_suffix(".away").rename(spool)  # back on host-a
    again = afc("resume", env={"AFC_HOST_ID": "host-a"})
    assert again.returncode == 0, again.stderr
    assert afc.rows("SELECT status, lease_owner, takeovers FROM jobs") == [("succeeded", None, 0)]
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(1,)]
    assert afc.rows("SELECT COUNT(*) FROM events WHERE kind = 'takeover'") == [(0,)]
    stored = s3.client.get_object(Bucket=s3.bucket, Key="films/b1/shot-001.png")["Body"].read()
    assert stored == kept


def test_a_worker_that_cannot_reach_storage_gives_back_a_host_leased_job_to_its_host(afc, s3):
    """A worker of the host whose spool holds a waiting job's output takes it at once (its
    host lease), and gives it back when its round cannot start (the storage check before the
    loop fails: S3 still down). Given back, the job was free for any host: a worker elsewhere
    met it first once S3 was back, found no spool file and dead-lettered it SPOOL_MISSING, the
    very thing the host lease is for."""
    import signal

    spool = _store_failed_on_host_a(afc, s3)
    assert afc.rows("SELECT lease_owner FROM jobs") == [(HOST_A_HOLD,)]
    s3.plan.add(Fault("HEAD", rf"^/{s3.bucket}/?$", "500", -1))  # the bucket check: S3 is down
    worker = afc.popen("worker", "--poll", "0.2", env={"AFC_HOST_ID": "host-a"})
    try:
        deadline = time.time() + 60
        while sum(1 for m, p, _ in s3.plan.injected if m == "HEAD") < 2:
            assert time.time() < deadline and worker.poll() is None, worker.stderr.read()
            time.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    assert afc.rows("SELECT status, step, lease_owner FROM jobs") == [
        ("waiting", "store", HOST_A_HOLD)
    ]
    s3.plan.clear()
    spool.rename(spool.with_suffix(".away"))  # host-b's disk has no such file
    assert afc("resume", env={"AFC_HOST_ID": "host-b"}).returncode == 1
    assert afc.rows("SELECT status, error_code FROM jobs") == [("waiting", None)]


def test_a_worker_pauses_a_job_whose_upload_failed_instead_of_spending_its_tries(afc, s3):
    """A storage outage that lets the bucket check pass but fails the uploads: a worker tried
    a job waiting to store again at each round (every --poll), so MAX_STORE_REQUEUES was spent
    in seconds and the job dead-lettered STORE_FAILED. The worker now leaves it for a pause
    that doubles at each failure (30 s first); the job waits, its output safe in the spool."""
    import signal

    afc.write_manifest(manifest(jobs(1), storage=s3.url))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    s3.plan.add(Fault("PUT", r"/films/", "500", -1))
    worker = afc.popen("worker", "--poll", "0.2", env={"AFC_HOST_ID": "host-a"})
    try:
        deadline = time.time() + 60
        while afc.rows("SELECT store_failures FROM jobs")[0][0] < 1:
            assert time.time() < deadline and worker.poll() is None, worker.stderr.read()
            time.sleep(0.1)
        time.sleep(6)  # thirty rounds of polling: it tried every round, five runs in seconds
        assert afc.rows("SELECT status, step, store_failures FROM jobs") == [
            ("waiting", "store", 1)
        ]
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) in (0, 1)
    s3.plan.clear()
    assert afc("resume", env={"AFC_HOST_ID": "host-a"}).returncode == 0  # a person: at once
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(1,)]


@pytest.mark.parametrize("kind", ["slowdown", "500"])
def test_a_passing_fault_on_the_bucket_check_does_not_end_the_run(afc, s3, kind):
    """The bucket's HEAD before a run is tried as the storage policy tries any storage call
    (README, "Retries": 3 tries for 5xx and SlowDown): it had one try, so a single SlowDown
    or 500 at the start of a submit (bench/soak.py --s3 met one) ended it with exit 1, and
    a batch left to run overnight did not start. Two faults, then S3 answers: it runs."""
    s3.plan.add(Fault("HEAD", rf"^/{s3.bucket}/?$", kind, 2, retry_after="0"))
    afc.write_manifest(manifest(jobs(2)))
    result = submit(afc, s3)
    assert result.returncode == 0, result.stderr
    assert [m for m, _, _ in s3.plan.injected] == ["HEAD", "HEAD"]
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",), ("succeeded",)]


def test_a_bucket_check_failing_every_try_still_ends_the_run_before_any_render(afc, s3):
    s3.plan.add(Fault("HEAD", rf"^/{s3.bucket}/?$", "500", -1, retry_after="0"))
    afc.write_manifest(manifest(jobs(2)))
    result = submit(afc, s3)
    assert result.returncode == 1 and "cannot use bucket" in result.stderr
    assert [m for m, _, _ in s3.plan.injected] == ["HEAD"] * 3
    assert not (afc.cwd / "afc.db").exists() or attempts(afc) == 0


def test_an_objects_content_type_is_what_its_bytes_are(afc, s3, monkeypatch, tmp_path):
    """An output key's ``{ext}`` is ``params.output_format`` (default png), and a model may
    answer another format (Replicate's flux answers WebP unless asked): the object was
    stored as ``image/png``, WebP bytes labelled PNG for every browser and CDN that served
    it. Its Content-Type is now what its first bytes say, else its key's extension."""
    from afc_cli import storage

    for name, value in afc.env.items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    target = storage.open(s3.url)
    for name, data, expected in [
        ("webp", b"RIFF\x24\x00\x00\x00WEBPVP8 " + bytes(24), "image/webp"),
        ("jpeg", b"\xff\xd8\xff\xe0" + bytes(28), "image/jpeg"),
        ("text", b"not an image at all", "image/png"),  # its key's extension
    ]:
        source = tmp_path / name
        source.write_bytes(data)
        meta = {
            "job_id": name,
            "key": name,
            "sha256": hashlib.sha256(data).hexdigest(),
            "size": len(data),
        }
        target.put_if_absent(f"b1/{name}.png", source, meta)
        head = s3.client.head_object(Bucket=s3.bucket, Key=f"films/b1/{name}.png")
        assert head["ContentType"] == expected, name
