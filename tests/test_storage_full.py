"""A store that takes no more bytes while its checks pass: a file storage folder whose write
fails 'No space left on device' (a disk filled past the free-space check, or a user's disk
quota, which no free-space check sees), an S3-compatible store answering 507
XMinioStorageFull (MinIO below its free-drive threshold). Retried as any failed write, each
store gave up in turn while the folder's or the bucket's check passed, and every job of the
batch was rendered and paid for, the renders piling up in the spool. Now the batch's other
renders wait unpaid for the run, as after an upload refused 403; the next run, with room,
stores each render and renders the rest once."""

from __future__ import annotations

import yaml
from conftest import jobs, manifest
from s3fake import Fault
from test_full_disk import afc_line, calls, in_namespace, namespace  # noqa: F401
from test_s3 import attempts, submit


def test_a_full_storage_folder_stops_the_batch_renders_of_the_run(afc, namespace):  # noqa: F811
    # renders of about 20 KB that take a while (an instant one is spooled before the first
    # store fails, and the next is rendered meanwhile)
    data = manifest(jobs(6, size="1024x1024", latency_s=0.5))
    (afc.cwd / "manifest.yaml").write_text(yaml.safe_dump(data))
    storage = "--storage", "file://disk/out"
    script = "\n".join(
        [
            "set -e",
            "mkdir -p disk && mount -t tmpfs -o size=4m tmpfs disk",
            "mkdir disk/out && head -c 4186000 /dev/zero > disk/filler",  # a few KB left
            # no free-space floor: the write itself meets the full disk, as under a quota
            f"{afc_line(afc, 'submit', 'manifest.yaml', *storage, '--concurrency', '1', min_free='0')}"
            " > first.out 2> first.err || echo $? > first.rc",
            "cp calls.log first-calls.log 2>/dev/null || true",
            "rm disk/filler",
            f"{afc_line(afc, 'resume', min_free='0')} > second.out 2> second.err"
            " || echo $? > second.rc",
            "ls disk/out/b1 > stored.ls",
        ]
    )
    result = in_namespace(afc, script)
    assert result.returncode == 0, result.stderr
    first_err = (afc.cwd / "first.err").read_text()
    assert (afc.cwd / "first.rc").read_text().strip() == "1", first_err
    assert "Traceback" not in first_err
    # the refused one and the one started as its render was spooled; the others wait unpaid
    assert sum(calls(afc, "first-calls.log").values()) <= 2, first_err
    assert "disk quota spent: free space there" in first_err, first_err
    second_err = (afc.cwd / "second.err").read_text()
    assert not (afc.cwd / "second.rc").exists(), second_err
    assert set(calls(afc).values()) == {1} and len(calls(afc)) == 6, "each rendered once"
    stored = (afc.cwd / "stored.ls").read_text().split()
    assert len([name for name in stored if name.endswith(".png")]) == 6


def test_a_full_s3_store_stops_the_batch_renders_of_the_run(afc, s3):
    afc.write_manifest(manifest(jobs(5, latency_s=1)))  # renders that take a while
    s3.plan.add(Fault("PUT", r"shot-", "full", -1))
    first = submit(afc, s3, "--concurrency", "1")
    assert first.returncode == 1, first.stderr
    assert "Traceback" not in first.stderr
    assert attempts(afc) == 2, "renders paid for whose uploads the full store refuses"
    [reason] = {r for (r,) in afc.rows("SELECT waiting_reason FROM jobs WHERE step = 'probe'")}
    assert "XMinioStorageFull" in reason and "the store is full" in reason, reason
    assert "no other job of batch b1 is rendered" in reason, reason
    s3.plan.clear()  # space freed
    second = afc("resume")
    assert second.returncode == 0, second.stderr
    assert afc.rows("SELECT DISTINCT status FROM jobs") == [("succeeded",)]
    assert attempts(afc) == 5, "each job rendered once"
