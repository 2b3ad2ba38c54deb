"""Outside audit 64f, the spool: a job failed OUTPUT_KEY_CONFLICT at its store step keeps its
paid render in the spool, and its message says 'afc retry' stores it once the key is free.
That retry starts the job at its probe, and the render step adopted the spool file as it
found it, its size and SHA-256 read from the file: a file damaged while the job waited (a
disk error, a truncation, another process writing in place) was stored as the job's output,
read back against itself and the job succeeded with those bytes. The ledger knew the render's
size and SHA-256 all along (its spool checkpoint): the file is now checked against them, as
the store step checks a file it uploads, so the damaged bytes are never stored (the job is
dead-lettered SPOOL_DAMAGED, the file set aside), through the real afc command."""

from __future__ import annotations

import hashlib
import time

from conftest import manifest


def _conflict_with_render_kept(afc):
    afc.write_manifest(manifest([{"key": "race", "prompt": "p"}]))
    release = afc.cwd / "release"  # the render returns once the other writer has written
    proc = afc.popen("submit", "manifest.yaml", env={"AFC_LOCAL_RELEASE": str(release)})
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            if afc.rows("SELECT COUNT(*) FROM attempts")[0][0]:
                break
        except Exception:  # the ledger is still being created
            pass
        time.sleep(0.02)
    folder = afc.outputs() / "b1"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "race.png").write_bytes(b"another writer's file")
    release.touch()
    assert proc.wait(timeout=30) == 1
    job = afc.json("show", "race")["job"]
    assert job["error"]["code"] == "OUTPUT_KEY_CONFLICT"
    spooled = afc.cwd / "afc.db-spool" / f"{job['id']}.spool"
    assert spooled.is_file(), "the paid render waits in the spool"
    (folder / "race.png").rename(afc.cwd / "moved-away.png")  # the key is free again
    return job, folder, spooled


def test_a_kept_render_damaged_before_the_retry_is_never_stored_as_the_output(afc):
    job, folder, spooled = _conflict_with_render_kept(afc)
    rendered = spooled.read_bytes()
    damaged = bytearray(rendered)
    damaged[len(damaged) // 2] ^= 0x01  # one bit flipped while the job waited
    spooled.write_bytes(bytes(damaged))

    assert afc("retry", "race").returncode == 0
    result = afc("resume")
    assert "Traceback" not in result.stderr, result.stderr
    assert not (folder / "race.png").exists(), "the damaged bytes were stored as the output"
    shown = afc.json("show", "race")["job"]
    assert shown["status"] == "dead", shown
    assert shown["error"]["code"] == "SPOOL_DAMAGED", shown
    aside = spooled.with_suffix(".damaged")
    assert aside.read_bytes() == bytes(damaged), "kept for a person to look at"
    assert not spooled.exists()
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(1,)], "nothing paid on its own"


def test_a_kept_render_truncated_before_the_retry_is_never_stored_as_the_output(afc):
    job, folder, spooled = _conflict_with_render_kept(afc)
    spooled.write_bytes(spooled.read_bytes()[:100])  # cut short while the job waited

    assert afc("retry", "race").returncode == 0
    afc("resume")
    assert not (folder / "race.png").exists(), "the truncated bytes were stored as the output"
    assert afc.json("show", "race")["job"]["error"]["code"] == "SPOOL_DAMAGED"


def test_a_kept_render_intact_is_stored_by_the_retry_with_no_new_render(afc):
    job, folder, spooled = _conflict_with_render_kept(afc)
    rendered = hashlib.sha256(spooled.read_bytes()).hexdigest()
    assert afc("retry", "race").returncode == 0
    assert afc("resume").returncode == 0
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(1,)], "no second render"
    assert hashlib.sha256((folder / "race.png").read_bytes()).hexdigest() == rendered
    assert not spooled.exists()
