"""Storage, found by outside audit 22e: the probe, store and verify steps that keep the promise
that a retry never pays again for an output already stored, and that no render is paid for that
could not be stored. S3 through moto's server over HTTP (tests/s3fake.py), file:// on disk;
the real ``afc`` command in a child process."""

from __future__ import annotations

import json
import os

from conftest import jobs, manifest
from s3fake import Fault

# Makes ``os.link`` fail as on a file system without hard links (FAT, exFAT: vfat answers
# EPERM; a FUSE mount without them, ENOSYS) for every link made under ``$AFC_TEST_NOLINK``.
NO_LINKS = """
import errno
import os

_link, _root = os.link, os.environ.get("AFC_TEST_NOLINK")


def _no_link(src, dst, *args, **kwargs):
    if _root and os.path.abspath(os.fsdecode(dst)).startswith(_root + os.sep):
        raise OSError(errno.EPERM, "Operation not permitted", dst)
    return _link(src, dst, *args, **kwargs)


os.link = _no_link
"""


# Refuses every create of a file under ``$AFC_TEST_DENY`` with EACCES while ``os.access`` still
# says the folder is writable, as an SELinux denial does (a container's volume without its
# label); reads are let through.
DENY_CREATES = """
import builtins
import errno
import os

_open, _os_open, _root = builtins.open, os.open, os.environ.get("AFC_TEST_DENY")


def _denied(path):
    try:
        path = os.path.abspath(os.fsdecode(path))
    except TypeError:  # a file descriptor
        return False
    return bool(_root) and path.startswith(_root + os.sep)


def _deny_open(file, mode="r", *args, **kwargs):
    if any(c in mode for c in "wax+") and _denied(file):
        raise PermissionError(errno.EACCES, "Permission denied", file)
    return _open(file, mode, *args, **kwargs)


def _deny_os_open(path, flags, *args, **kwargs):
    if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and _denied(path):
        raise PermissionError(errno.EACCES, "Permission denied", path)
    return _os_open(path, flags, *args, **kwargs)


builtins.open, os.open = _deny_open, _deny_os_open
"""


def _site(afc, text: str) -> dict[str, str]:
    """The environment of an ``afc`` child that runs ``text`` as its ``sitecustomize``, this
    clone's code still first on its path."""
    site = afc.cwd / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(text)
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}


def test_a_folder_on_a_file_system_without_hard_links_is_refused_before_any_render(afc):
    """Every create-only write of ``file://`` storage ends in a hard link (the metadata's and
    the object's: a fsynced temporary file linked into place). On a file system without them
    (an exFAT external drive, an rclone FUSE mount) the bucket-like check passed (the folder
    is writable), every job's render was paid, and every store failed 'Operation not
    permitted': the jobs waited at store, run after run, until dead-lettered STORE_FAILED,
    none of their paid outputs ever stored. The storage check before a run links an empty
    file: the submit is refused (exit 2) with the reason, nothing rendered or admitted."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}, {"key": "b", "prompt": "q"}]))
    outputs = afc.outputs()
    outputs.mkdir()
    calls = afc.cwd / "calls.log"
    env = {
        **_site(afc, NO_LINKS),
        "AFC_TEST_NOLINK": str(outputs),
        "AFC_LOCAL_CALL_LOG": str(calls),
    }
    result = afc("submit", "manifest.yaml", env=env)
    assert "unexpected error" not in result.stderr and "Traceback" not in result.stderr
    assert result.returncode == 2, result.stderr
    assert "hard links" in result.stderr
    assert not calls.exists() or calls.read_text() == "", "a render was paid for"
    assert not (afc.cwd / "afc.db").exists()
    assert list(outputs.iterdir()) == []  # the check leaves nothing behind
    # the same folder where links work: the batch runs
    result = afc("submit", "manifest.yaml")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (outputs / "b1").iterdir()) == [
        "a.png",
        "a.png.afc.json",
        "b.png",
        "b.png.afc.json",
    ]


def test_metadata_header_names_in_any_case_are_afcs_own(afc, s3):  # noqa: F811
    """HTTP header names are case-insensitive, and botocore keeps an object's
    ``x-amz-meta-*`` names as the server spelt them (boto/botocore#1963): behind a Go
    reverse proxy (Traefik, Caddy: ``X-Amz-Meta-Afc-Job-Id``) or from an S3-compatible store
    that answers them so, the metadata read as 'Afc-Job-Id', found no 'afc-' name, and afc's
    own object read as one 'afc did not write'. A run killed after its upload landed (or a PUT
    whose answer was lost, tried again) then met its own object at the create-only store and
    failed OUTPUT_KEY_CONFLICT, its paid, stored render recorded as a failure; a ledger
    rebuilt over the bucket failed every stored job so. The names are read case-insensitively:
    the resumed job succeeds from its object, no second render, and a fresh ledger renders
    nothing."""
    s3.plan.title_case_meta = True
    afc.write_manifest(manifest(jobs(2)))
    calls = afc.cwd / "calls.log"
    env = {"AFC_LOCAL_CALL_LOG": str(calls)}
    killed = afc(
        "submit",
        "manifest.yaml",
        "--storage",
        s3.url,
        "--concurrency",
        "1",
        env={**env, "AFC_CRASH_POINT": "after_store"},
    )
    assert killed.returncode < 0 or killed.returncode == 137, killed.stderr
    result = afc("resume", env=env)
    assert result.returncode == 0, result.stderr
    assert afc.rows("SELECT key, status, error_code FROM jobs ORDER BY key") == [
        ("shot-001", "succeeded", None),
        ("shot-002", "succeeded", None),
    ]
    # one render a job, but for the other job's call the kill cut off in flight (the
    # next render starts while the first job stores: on a busy machine it had not
    # answered yet), which the ledger keeps as 'unknown' and the resume renders again
    cut_off = {
        job_id for (job_id,) in afc.rows("SELECT job_id FROM attempts WHERE status = 'unknown'")
    }
    renders = [line.split()[0] for line in calls.read_text().splitlines()]
    assert len(cut_off) <= 1, cut_off
    assert sorted(renders.count(job_id) for job_id in set(renders)) == [1, 2 if cut_off else 1]
    assert all(renders.count(job_id) == 2 for job_id in cut_off), (renders, cut_off)
    for suffix in ("", "-wal", "-shm"):
        (afc.cwd / f"afc.db{suffix}").unlink(missing_ok=True)
    before = len(renders)
    result = afc("submit", "manifest.yaml", "--storage", s3.url, "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["counts"] == {"succeeded": 2}
    assert len(calls.read_text().splitlines()) == before  # nothing rendered again


def _fresh_ledger(afc) -> None:
    for suffix in ("", "-wal", "-shm"):
        (afc.cwd / f"afc.db{suffix}").unlink(missing_ok=True)


def test_a_sidecar_rewritten_with_other_types_does_not_stop_the_run(afc):
    """A ``<key>.afc.json`` naming the job (its id and request hash) whose other fields a
    person or a script rewrote (a size as a string, as S3 metadata keeps it; a list where the
    provider's name was; a cost no render has): at the probe of a ledger rebuilt over the
    outputs, the size stopped the run 'unexpected error: TypeError ... (a bug in afc)', the
    list 'cannot write to the ledger ... fix the disk or file system', the cost 'Python int
    too large', each exit 1 with every job of the batch left queued, and every 'afc resume'
    the same. Each field is read as afc writes it or not at all: the jobs succeed from
    storage, nothing rendered; one whose SHA-256 is unreadable fails VERIFY_FAILED alone."""
    afc.write_manifest(manifest(jobs(4)))
    assert afc("submit", "manifest.yaml").returncode == 0
    folder = afc.outputs() / "b1"
    edits = {
        "shot-001": lambda meta: {"size": str(meta["size"]), "cost": "99999999999999"},
        "shot-002": lambda meta: {"provider": ["local"], "attempt": "one"},
        "shot-003": lambda meta: {"cost": "-1", "model": {"name": "m1"}},
        "shot-004": lambda meta: {"sha256": 12345},
    }
    for key, edit in edits.items():
        sidecar = folder / f"{key}.png.afc.json"
        meta = json.loads(sidecar.read_text())
        sidecar.write_text(json.dumps({**meta, **edit(meta)}))
    _fresh_ledger(afc)
    calls = afc.cwd / "calls.log"
    result = afc("submit", "manifest.yaml", env={"AFC_LOCAL_CALL_LOG": str(calls)})
    assert "unexpected error" not in result.stderr and "Traceback" not in result.stderr
    assert "cannot write to the ledger" not in result.stderr, result.stderr
    assert result.returncode == 1, result.stderr
    assert afc.rows("SELECT key, status, error_code FROM jobs ORDER BY key") == [
        ("shot-001", "succeeded", None),
        ("shot-002", "succeeded", None),
        ("shot-003", "succeeded", None),
        ("shot-004", "failed", "VERIFY_FAILED"),
    ]
    assert not calls.exists(), "a render was paid for"
    assert afc.rows("SELECT output_size FROM jobs WHERE key = 'shot-001'")[0][0] > 0


def test_an_s3_object_whose_checksum_metadata_is_not_hex_fails_its_verify_alone(afc, s3):  # noqa: F811
    """An object of the job (its id and request hash in its metadata) whose ``afc-sha256``
    is no SHA-256 (metadata replaced by a copy with a tool, hand-edited): the verify of a
    ledger rebuilt over the bucket read it as hex and the run stopped 'unexpected error:
    ValueError ... (a bug in afc)', exit 1, every job of the batch left as it was, and every
    'afc resume' the same. The field is read as no checksum: that job fails VERIFY_FAILED,
    the others succeed from storage, nothing rendered."""
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml", "--storage", s3.url).returncode == 0
    key = "films/b1/shot-001.png"
    meta = s3.client.head_object(Bucket=s3.bucket, Key=key)["Metadata"]
    s3.client.copy_object(
        Bucket=s3.bucket,
        Key=key,
        CopySource={"Bucket": s3.bucket, "Key": key},
        Metadata={**meta, "afc-sha256": "not-a-sha256"},
        MetadataDirective="REPLACE",
    )
    _fresh_ledger(afc)
    calls = afc.cwd / "calls.log"
    result = afc(
        "submit", "manifest.yaml", "--storage", s3.url, env={"AFC_LOCAL_CALL_LOG": str(calls)}
    )
    assert "unexpected error" not in result.stderr and "Traceback" not in result.stderr
    assert result.returncode == 1, result.stderr
    assert afc.rows("SELECT key, status, error_code FROM jobs ORDER BY key") == [
        ("shot-001", "failed", "VERIFY_FAILED"),
        ("shot-002", "succeeded", None),
    ]
    assert not calls.exists(), "a render was paid for"


def test_a_probe_denied_names_the_fix_as_any_access_denied_does(afc, s3):  # noqa: F811
    """S3 answers a HEAD without a body, so a probe (or a verify) refused 403 reached afc as
    the bare code '403', not 'AccessDenied', and the job waited at its probe saying only
    'cannot read s3://...: 403 Forbidden', run after run until dead-lettered, where README
    says an AccessDenied names the bucket and the fix (a role that may list the bucket, which
    the check before a run asks, but not read its objects). Nothing is rendered (the key
    could not be looked at), and the waiting reason names what to fix."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    s3.plan.add(Fault("HEAD", r"/films/b1/", "403", -1))
    calls = afc.cwd / "calls.log"
    result = afc(
        "submit", "manifest.yaml", "--storage", s3.url, env={"AFC_LOCAL_CALL_LOG": str(calls)}
    )
    assert result.returncode == 1, result.stderr
    [(status, step, reason)] = afc.rows("SELECT status, step, waiting_reason FROM jobs")
    assert (status, step) == ("waiting", "probe"), result.stderr
    assert "403" in reason and "bucket policy" in reason and "AWS_ACCESS_KEY_ID" in reason, reason
    assert not calls.exists(), "a render was paid for a key that could not be looked at"


def test_an_output_key_too_long_with_the_s3_prefix_is_refused_before_any_render(afc, s3):  # noqa: F811
    """S3 refuses an object key longer than 1024 bytes (KeyTooLongError, not retried). The
    manifest holds an output key to that limit, but the storage prefix comes before it: a key
    of 1008 bytes under a 21-byte prefix was admitted, rendered and paid for, then refused at
    every store until dead-lettered STORE_FAILED. The storage check before a run counts the
    prefix: the submit is refused (exit 2), nothing admitted or rendered."""
    key = "k" * 200
    data = manifest([{"key": key, "prompt": "p"}], batch="b" * 200)
    data["defaults"]["output"] = "{batch}/{key}/{key}/{key}/{key}.{ext}"  # 1008 bytes
    afc.write_manifest(data)
    calls = afc.cwd / "calls.log"
    url = f"s3://{s3.bucket}/{'p' * 20}"
    result = afc(
        "submit", "manifest.yaml", "--storage", url, env={"AFC_LOCAL_CALL_LOG": str(calls)}
    )
    assert "Traceback" not in result.stderr
    assert result.returncode == 2, result.stderr
    assert "1029 bytes" in result.stderr and "1024" in result.stderr
    assert not calls.exists(), "a render was paid for"
    assert not (afc.cwd / "afc.db").exists()
    # under the bucket's root the same key fits: the batch runs
    result = afc("submit", "manifest.yaml", "--storage", f"s3://{s3.bucket}")
    assert result.returncode == 0, result.stderr


def test_a_conflict_over_metadata_alone_says_what_is_at_the_key(afc):
    """What the probe finds at a key decides; the words must say what it found. Metadata of
    another job's output without its object (that job's store cut short between the two
    creates: the key is that job's, and its next run completes the store) was reported as
    'already holds the output of another job', a file a person looked for and did not find;
    a sidecar that cannot be read (emptied by an interrupted copy, a disk error), of this
    job's own output too, as 'the output of another job ('unknown', job id None)'. Both stay
    OUTPUT_KEY_CONFLICT with nothing rendered or overwritten, and say what is there."""
    data = manifest([{"key": "a", "prompt": "p"}, {"key": "b", "prompt": "q"}])
    data["defaults"]["output"] = "{key}.{ext}"
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    (afc.outputs() / "a.png").unlink()  # b1/a's metadata alone: its store cut short
    (afc.outputs() / "b.png.afc.json").write_text("")  # b1/b's own sidecar, emptied
    _fresh_ledger(afc)
    afc.write_manifest({**data, "batch": "b2"}, "other.yaml")
    calls = afc.cwd / "calls.log"
    env = {"AFC_LOCAL_CALL_LOG": str(calls)}
    assert afc("submit", "other.yaml", env=env).returncode == 1
    assert not calls.exists(), "a render was paid for"
    story = afc.json("show", "a", "--batch", "b2")["job"]["error"]
    assert story["code"] == "OUTPUT_KEY_CONFLICT"
    assert "'b1/a'" in story["message"] and "not written yet" in story["message"], story
    story = afc.json("show", "b", "--batch", "b2")["job"]["error"]
    assert story["code"] == "OUTPUT_KEY_CONFLICT"
    assert "cannot be read" in story["message"] and "unknown" not in story["message"], story
    assert not (afc.outputs() / "a.png").exists()
    # b1/b's own output, its sidecar unreadable: the same words, never overwritten
    _fresh_ledger(afc)
    assert afc("submit", "manifest.yaml", env=env).returncode == 1
    story = afc.json("show", "b", "--batch", "b1")["job"]["error"]
    assert story["code"] == "OUTPUT_KEY_CONFLICT"
    assert "cannot be read" in story["message"] and "unknown" not in story["message"], story
    assert (afc.outputs() / "b.png.afc.json").read_text() == ""


def test_a_folder_whose_creates_are_denied_though_writable_is_refused_before_any_render(afc):
    """The check before a run asked ``os.access``, which reads the permission bits alone: a
    security module's denial (SELinux refusing a container's writes to a volume not labelled
    for it, the ':Z' left out) passed it, every job's render was paid, and every store failed
    'Permission denied', not retried: the jobs waited at store run after run until
    dead-lettered, their paid outputs never stored. The check creates a file: the submit is
    refused (exit 2) with the reason, nothing rendered or admitted."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    outputs = afc.outputs()
    outputs.mkdir()
    calls = afc.cwd / "calls.log"
    env = {
        **_site(afc, DENY_CREATES),
        "AFC_TEST_DENY": str(outputs),
        "AFC_LOCAL_CALL_LOG": str(calls),
    }
    result = afc("submit", "manifest.yaml", env=env)
    assert "unexpected error" not in result.stderr and "Traceback" not in result.stderr
    assert result.returncode == 2, result.stderr
    assert "Permission denied" in result.stderr and "cannot use storage" in result.stderr
    assert not calls.exists() or calls.read_text() == "", "a render was paid for"
    assert not (afc.cwd / "afc.db").exists()
