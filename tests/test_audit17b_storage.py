"""Storage, the spool and the verify step, found by an outside audit: what is at an output key
decides before a render is paid, and no answer of the storage ends a run with 'unexpected
error' (a bug in afc) while its paid render waits in the spool."""

from __future__ import annotations

import json

import pytest
from conftest import manifest
from s3fake import Fault


def _attempts(afc) -> int:
    return afc.rows("SELECT COUNT(*) FROM attempts")[0][0]


def test_a_dangling_link_at_an_output_key_is_someone_elses_before_any_render(afc):
    """A symbolic link at an output key whose target is gone (a folder of links into a disk
    that is not mounted) read as a free key: the render was paid, the create-only store found
    the name taken, the key then read as empty, and the run ended 'unexpected error:
    AttributeError ... (a bug in afc)', exit 1, the job left queued; each 'afc resume' did the
    same. The link is an entry afc did not write: the job fails OUTPUT_KEY_CONFLICT at its
    probe, no render paid, the link untouched."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    folder = afc.outputs() / "b1"
    folder.mkdir(parents=True)
    (folder / "a.png").symlink_to(afc.cwd / "unmounted" / "a.png")
    result = afc("submit", "manifest.yaml")
    assert "unexpected error" not in result.stderr and "Traceback" not in result.stderr
    assert result.returncode == 1, result.stderr
    assert afc.rows("SELECT status, error_code FROM jobs") == [("failed", "OUTPUT_KEY_CONFLICT")]
    assert _attempts(afc) == 0  # nothing paid
    assert (folder / "a.png").is_symlink()
    assert not (folder / "a.png.afc.json").exists()


def test_metadata_of_another_render_without_its_object_keeps_the_paid_render_waiting(afc):
    """The metadata is created before the object: a run that died in between (or one still
    writing: a stalled run's late result) leaves ``<key>.afc.json`` of the job naming another
    render's SHA-256 and no object. The next render's create-only store stood back, the key
    read as the job's own, and the job was ended VERIFY_FAILED ('... is not there'), its paid
    render in the spool; 'afc retry' adopted that spool file and failed the same way. The key
    is taken by no object: the job waits in store with its spool file (the next run tries the
    store again), and once the stale metadata is gone the next run stores the paid render,
    with no second render."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    [(job_id, request_hash)] = afc.rows("SELECT id, request_hash FROM jobs")
    folder = afc.outputs() / "b1"
    folder.mkdir(parents=True)
    sidecar = folder / "a.png.afc.json"
    stale = {"job_id": job_id, "key": "a", "batch": "b1", "request_hash": request_hash}
    sidecar.write_text(json.dumps({**stale, "sha256": "ab" * 32, "size": 7, "attempt": 1}))
    result = afc("resume")
    assert "unexpected error" not in result.stderr and "Traceback" not in result.stderr
    assert result.returncode == 1, result.stderr
    [(status, step, code)] = afc.rows("SELECT status, step, error_code FROM jobs")
    assert (status, step, code) == ("waiting", "store", None), result.stderr
    assert list((afc.cwd / "afc.db-spool").glob("*.spool"))  # the paid render is kept
    assert _attempts(afc) == 1
    sidecar.unlink()  # a person removes the stale metadata (or its writer finishes)
    result = afc("resume")
    assert result.returncode == 0, result.stderr
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert _attempts(afc) == 1  # stored from the spool: no second render
    assert (folder / "a.png").exists()


def test_a_part_answered_without_an_etag_is_a_storage_error_and_the_upload_aborted(
    tmp_path, monkeypatch
):
    """An S3-compatible store (or a proxy in front of it) that answers UploadPart without its
    ETag header: ``answer['ETag']`` raised KeyError out of the storage call, past the storage
    policy, and the run ended 'unexpected error: KeyError' (a bug in afc), exit 1. It is a
    StorageError naming the store's answer (the job waits in store with its spool file), and
    the upload is aborted so its parts are not billed."""
    from botocore.stub import Stubber

    from afc_cli.errors import StorageError
    from afc_cli.storage import s3 as s3mod

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setattr(s3mod, "MULTIPART_THRESHOLD", 8)
    monkeypatch.setattr(s3mod, "PART_SIZE", 64)
    source = tmp_path / "j.spool"
    source.write_bytes(b"x" * 100)
    storage = s3mod.S3Storage("s3://renders/films")
    stub = Stubber(storage.client)
    stub.add_response("create_multipart_upload", {"UploadId": "u1"})
    stub.add_response("upload_part", {})  # no ETag
    stub.add_response(
        "abort_multipart_upload",
        {},
        {"Bucket": "renders", "Key": "films/b1/a.png", "UploadId": "u1"},
    )
    stub.add_client_error("head_object", "404", http_status_code=404)
    meta = {"job_id": "j", "request_hash": "h", "sha256": "ab" * 32, "size": 100}
    with stub, pytest.raises(StorageError) as raised:
        storage.put_if_absent("b1/a.png", source, meta)
    assert "no ETag" in raised.value.message and not raised.value.retryable
    stub.assert_no_pending_responses()  # the upload was aborted


def test_a_job_whose_storage_fails_at_its_probe_is_not_promised_a_free_retry(afc, s3):  # noqa: F811
    """Storage failing at a fresh job's probe (its key could not be read: an outage, expired
    credentials) said 'the next run retries the probe step, never the render', and once
    dead-lettered, 'afc retry KEY' (it stores the spooled output; no render)': nothing was
    ever rendered, no spool file exists, and the retry pays for a render. The job is told
    what the render step's storage failure is told: storage is read again before any render
    is paid."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    s3.plan.add(Fault("HEAD", r"/films/", "500", -1))
    first = afc.json("submit", "manifest.yaml", "--storage", s3.url, expect=1)
    [job] = first["jobs"]
    assert (job["status"], job["step"]) == ("waiting", "probe")
    assert "never the render" not in job["waiting"]
    assert "before any render is paid" in job["waiting"]
    for _ in range(4):
        afc("resume")
    story = afc.json("show", "a")
    assert story["job"]["error"]["code"] == "STORE_FAILED"
    message = story["job"]["error"]["message"]
    assert "no render" not in message and "before any render is paid" in message
    assert _attempts(afc) == 0


def test_an_aws_profile_that_cannot_give_credentials_is_a_usage_error_tried_once(afc, tmp_path):
    """AWS_PROFILE naming no profile (a typo), or one whose credentials cannot be had (an SSO
    session expired, a credential_process failing): botocore raises a BotoCoreError, which
    the storage policy retried as a passing fault, three tries with backoff, then exit 1 as
    if S3 were down. Like no credentials at all, it is the user's setting: exit 2 before
    anything is written, one try, the message naming the profile and the fix."""
    config = tmp_path / "aws-config"
    config.write_text("[profile broken]\ncredential_process = /bin/false\nregion = us-east-1\n")
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        afc.env.pop(name, None)
    env = {
        "AWS_CONFIG_FILE": str(config),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9",  # never reached: no credentials to sign
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    for profile, said in (("typo", "profile (typo) could not be found"), ("broken", "custom")):
        result = afc(
            "submit",
            "manifest.yaml",
            "--storage",
            "s3://renders/films",
            env={**env, "AWS_PROFILE": profile},
        )
        assert result.returncode == 2, result.stderr
        assert said in result.stderr and "AWS_PROFILE" in result.stderr
        assert "Traceback" not in result.stderr
        assert not (afc.cwd / "afc.db").exists()


def test_a_link_loop_at_an_output_key_is_someone_elses_and_the_batch_runs(afc):
    """A symbolic link at an output key that points at itself (a loop): the folder check
    before the run followed it (ELOOP) and the submit ended exit 1 with 'Too many levels of
    symbolic links ...; every job stays resumable: fix it, then run afc resume', no ledger
    written for that resume to find, and no other job of the batch run. The link is an entry
    afc did not write: that job fails OUTPUT_KEY_CONFLICT before any render, the others run."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}, {"key": "b", "prompt": "q"}]))
    folder = afc.outputs() / "b1"
    folder.mkdir(parents=True)
    (folder / "a.png").symlink_to("a.png")
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 1, result.stderr
    assert "afc resume" not in result.stderr and "Traceback" not in result.stderr
    assert afc.rows("SELECT key, status, error_code FROM jobs ORDER BY key") == [
        ("a", "failed", "OUTPUT_KEY_CONFLICT"),
        ("b", "succeeded", None),
    ]
    assert _attempts(afc) == 1  # b's alone
    assert (folder / "a.png").is_symlink()
