"""Storage, found by outside audit 22e: the probe, store and verify steps that keep the promise
that a retry never pays again for an output already stored, and that no render is paid for that
could not be stored. S3 through moto's server over HTTP (tests/s3fake.py), file:// on disk;
the real ``afc`` command in a child process."""

from __future__ import annotations

import json
import os

from conftest import jobs, manifest
from test_s3 import moto_server, s3  # noqa: F401 - the S3 fixtures

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
    assert len(calls.read_text().splitlines()) == 2  # one render a job
    for suffix in ("", "-wal", "-shm"):
        (afc.cwd / f"afc.db{suffix}").unlink(missing_ok=True)
    result = afc("submit", "manifest.yaml", "--storage", s3.url, "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["counts"] == {"succeeded": 2}
    assert len(calls.read_text().splitlines()) == 2  # nothing rendered again
