"""Outside audit 56f: 'afc retry' of a succeeded job looks for its file:// output (audit 56b)
and, where it is not found, says it was deleted or moved and to put the file back or submit
the request under a new key, which renders and pays again. Where the whole storage folder is
not there (a drive or share not mounted), every output of it was said so, one by one: a
person told to pay again for pictures that are on a drive not plugged in. The folder's
absence is now said as the run says it (``FileStorage._gone``), nothing told to be
rendered again."""

from __future__ import annotations

from conftest import manifest


def test_retry_of_a_succeeded_job_whose_storage_folder_is_not_mounted_says_so(afc):
    afc.write_manifest(manifest([{"key": "a", "prompt": "p"}]))
    calls = afc.cwd / "calls.log"
    env = {"AFC_LOCAL_CALL_LOG": str(calls)}
    assert afc("submit", "manifest.yaml", env=env).returncode == 0
    root = afc.outputs()
    away = root.with_name(root.name + "-unmounted")
    root.rename(away)  # the drive unplugged: its mount point gone with it
    result = afc("retry", "a", env=env)
    assert result.returncode == 2, result.stderr
    assert "does not exist (a drive or share not mounted?)" in result.stderr, result.stderr
    assert "submit the request under a new key to render it again" not in result.stderr
    assert "deleted or moved" not in result.stderr, result.stderr
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert len(calls.read_text().splitlines()) == 1  # nothing rendered again
    assert not root.exists(), "the storage folder was made again"
