"""A file storage folder on a disk of its own that is full (outside audit 32g): an external
drive or a NAS share for the outputs, the ledger and its spool on the machine's own disk.
The check before each render looked at the spool's disk alone (AFC_MIN_FREE_MB), and the
storage check a failed store makes the run's next probe repeat (``_storage_broke``) asks only
whether the folder is writable: every job was rendered and paid for, and each one's store
then failed 'No space left on device', the renders piling up in the spool (dead-lettered
after five such runs). Now no render starts while the storage's disk has less than
AFC_MIN_FREE_MB free, as for the spool's: the job waits with the reason and the run exits 1;
a resume after freeing space renders each job once. Run on a small tmpfs in a private mount
namespace (``unshare -rm``), as tests/test_full_disk.py."""

from __future__ import annotations

from test_full_disk import afc_line, calls, in_namespace, namespace, write_manifest  # noqa: F401


def test_no_render_starts_while_the_storage_disk_is_full(afc, namespace):  # noqa: F811
    write_manifest(afc, 6)
    storage = "--storage", "file://disk/out"
    script = "\n".join(
        [
            "set -e",
            "mkdir -p disk && mount -t tmpfs -o size=4m tmpfs disk",
            "head -c 4180000 /dev/zero > disk/filler",  # about 14 KB left
            f"{afc_line(afc, 'submit', 'manifest.yaml', *storage, '--concurrency', '1', min_free='1')}"
            " > first.out 2> first.err || echo $? > first.rc",
            "cp calls.log first-calls.log 2>/dev/null || true",
            "rm disk/filler",
            f"{afc_line(afc, 'resume', min_free='1')} > second.out 2> second.err"
            " || echo $? > second.rc",
            "ls disk/out/b1 > stored.ls",
        ]
    )
    result = in_namespace(afc, script)
    assert result.returncode == 0, result.stderr
    first_err = (afc.cwd / "first.err").read_text()
    assert (afc.cwd / "first.rc").read_text().strip() == "1", first_err
    assert "Traceback" not in first_err
    assert "MiB free where outputs are stored" in first_err, first_err
    assert "no render was started. Free space, then run 'afc resume'" in first_err
    assert not calls(afc, "first-calls.log")  # nothing paid for that could not be stored
    second_err = (afc.cwd / "second.err").read_text()
    assert not (afc.cwd / "second.rc").exists(), second_err
    assert set(calls(afc).values()) == {1} and len(calls(afc)) == 6
    stored = (afc.cwd / "stored.ls").read_text().split()
    assert len([name for name in stored if name.endswith(".png")]) == 6
