"""Outside audit 44b, storage: a job whose output key was taken while it rendered fails
OUTPUT_KEY_CONFLICT at its store step with its paid render in the spool. Its message said only
that afc never overwrites the object there: read as a render lost, the job was given a new key
and paid for again, while the render paid for stayed in the spool for good. It says where the
render is and how to store it, and that way pays nothing, through the real afc command."""

from __future__ import annotations

import hashlib
import time

from conftest import manifest


def test_a_conflict_at_the_store_step_says_the_paid_render_is_kept_and_how_to_store_it(afc):
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
    message = job["error"]["message"]
    assert "afc never overwrites it" in message
    assert f"paid render is kept in {spooled}" in message, message
    assert "'afc retry race'" in message and "no new render" in message, message

    # the way out it names: the other file moved away, a retry stores the render paid for
    rendered = hashlib.sha256(spooled.read_bytes()).hexdigest()
    (folder / "race.png").rename(afc.cwd / "moved-away.png")
    assert afc("retry", "race").returncode == 0
    assert afc("resume").returncode == 0
    assert afc.rows("SELECT status FROM jobs") == [("succeeded",)]
    assert afc.rows("SELECT COUNT(*) FROM attempts") == [(1,)], "no second render"
    assert hashlib.sha256((folder / "race.png").read_bytes()).hexdigest() == rendered
