"""A paid render kept in the spool with its ``.about`` record (a run whose ledger broke:
``pipeline.keep_rendered``), damaged on disk before the next run (outside audit 35c).

The next run adopts a spool file no checkpoint describes (``pipeline._adopt_spool``). It took
the file as found: a bit flipped or a file truncated since was checkpointed as the render,
stored under the job's output key and verified against itself, and the job succeeded with a
damaged output, though the file's ``.about`` record said which bytes were paid for. A file
whose checkpoint says otherwise is never stored (``spool.damage``, ``SPOOL_DAMAGED``): the
record now stands for that checkpoint."""

from __future__ import annotations

import hashlib
import signal

from conftest import manifest

from afc_cli.spool import Spool


def kept_as_the_ledger_broke(afc, request_hash: str | None = None):
    """One job rendered by 'local' and spooled, its process killed before the spool's
    checkpoint, and the ``.about`` record a run whose ledger broke writes beside the file
    (``_describe``, as ``keep_rendered`` does). Returns the spool file."""
    afc.write_manifest(manifest([{"key": "a", "prompt": "a"}]))
    died = afc("submit", "manifest.yaml", env={"AFC_CRASH_POINT": "after_spool"})
    assert died.returncode == -signal.SIGKILL, died.stderr
    [(job_id, own_hash)] = afc.rows("SELECT id, request_hash FROM jobs")
    spool = Spool(afc.cwd / "afc.db-spool")
    found = spool.find(job_id)
    spool.describe(
        job_id,
        {
            "request_hash": request_hash or own_hash,
            "provider": "local",
            "model": "m1",
            "attempt": 1,
            "cost_micros": 50_000,
            "cost_source": "local",
            "size": found.size,
            "sha256": found.sha256,
        },
    )
    return found.path


def test_a_kept_render_damaged_on_disk_is_never_stored_as_the_output(afc):
    path = kept_as_the_ledger_broke(afc)
    paid = path.read_bytes()
    damaged = bytearray(paid)
    damaged[200] ^= 0x01  # a bit flipped on disk
    path.write_bytes(bytes(damaged))

    resumed = afc("resume")
    assert resumed.returncode == 1, resumed.stderr
    assert "SPOOL_DAMAGED" in resumed.stderr or "damaged" in resumed.stderr
    assert "Traceback" not in resumed.stderr
    assert not (afc.outputs() / "b1" / "a.png").exists(), "a damaged output was stored"
    story = afc.json("show", "a", expect=None)
    assert story["job"]["status"] == "dead"
    assert story["job"]["error"]["code"] == "SPOOL_DAMAGED"
    # the paid attempt is recorded with the cost its record kept; the bytes are set aside
    assert afc.rows("SELECT number, status, cost_micros FROM attempts") == [
        (1, "succeeded", 50_000)
    ]
    assert path.with_suffix(".damaged").read_bytes() == bytes(damaged)
    assert not path.exists()


def test_a_truncated_kept_render_is_never_stored_either(afc):
    path = kept_as_the_ledger_broke(afc)
    path.write_bytes(path.read_bytes()[:100])

    resumed = afc("resume")
    assert resumed.returncode == 1, resumed.stderr
    assert not (afc.outputs() / "b1" / "a.png").exists()
    assert afc.json("show", "a", expect=None)["job"]["error"]["code"] == "SPOOL_DAMAGED"


def test_a_record_of_another_request_is_not_taken_for_damage(afc):
    """A record left by a render of another request (the ledger made anew to change the job)
    does not describe this job's file: the file is adopted and stored, as before."""
    path = kept_as_the_ledger_broke(afc, request_hash="0" * 64)
    spooled = path.read_bytes()
    about = path.with_suffix(".about")
    about.write_text(about.read_text().replace('"size": ', '"size": 1'))

    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert (afc.outputs() / "b1" / "a.png").read_bytes() == spooled
    assert afc.rows("SELECT number, status FROM attempts") == [(1, "succeeded")]


def test_a_kept_render_stored_before_its_file_was_damaged_is_the_output(afc):
    """The run whose ledger broke stored its kept render too (``store_kept``), then the file
    left in the spool was damaged: the object, the render paid for, is the job's output (the
    store step finds its own object), not dead-lettered SPOOL_DAMAGED."""
    from afc_cli.storage.file import FileStorage

    path = kept_as_the_ledger_broke(afc)
    paid = path.read_bytes()
    [(job_id, request_hash)] = afc.rows("SELECT id, request_hash FROM jobs")
    meta = {
        "job_id": job_id,
        "key": "a",
        "batch": "b1",
        "request_hash": request_hash,
        "provider": "local",
        "model": "m1",
        "attempt": 1,
        "cost": "0.050000",
        "cost_source": "local",
        "sha256": hashlib.sha256(paid).hexdigest(),
        "size": len(paid),
    }
    FileStorage(str(afc.outputs())).put_if_absent("b1/a.png", path, meta)
    # the object is a hard link of the spool file: a file put in its place (a copy back that
    # lost its last byte), not the object's bytes changed
    path.unlink()
    path.write_bytes(paid[:-1])

    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert (afc.outputs() / "b1" / "a.png").read_bytes() == paid
    story = afc.json("show", "a")
    assert story["job"]["status"] == "succeeded"
    assert afc.rows("SELECT number, status, cost_micros FROM attempts") == [
        (1, "succeeded", 50_000)
    ]
