"""A ``file://`` folder of one path on two hosts is two folders: a batch's runs are held to the
one its first run stored in (``run.hold_folder``, the folder's ``.afc-folder`` mark recorded on
the batch). Hosts are stood for by ``AFC_HOST_ID``; the other host's own folder by moving the
first's away and putting another at its path, as a machine without the share mounted has.

Before: a worker on a host where the shared folder was not mounted made its own (the batch
had no output stored yet), or used a local folder of that path, and stored its part of the
batch there, every job said to have succeeded and exit 0 (outside audit 64d)."""

from __future__ import annotations

import shutil
import subprocess

from conftest import jobs, manifest

A = {"AFC_HOST_ID": "host-a"}
B = {"AFC_HOST_ID": "host-b"}


def _stored(afc) -> int:
    return afc.rows("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'")[0][0]


def _calls(afc) -> int:
    return afc.rows("SELECT COUNT(*) FROM attempts")[0][0]


def _other_hosts_folder(afc):
    """Host A's folder moved away (on its own machine now), an empty one at its path."""
    out = afc.cwd / "out"
    shutil.move(out, afc.cwd / "out-on-host-a")
    out.mkdir()
    return out


def test_another_hosts_folder_of_the_path_is_refused_before_anything_is_written(afc):
    afc.write_manifest(manifest(jobs(2)))
    storage = f"file://{afc.cwd}/out"
    assert afc("submit", "manifest.yaml", "--storage", storage, env=A).returncode == 0
    assert (afc.cwd / "out/.afc-folder").read_text().strip()
    out = _other_hosts_folder(afc)

    afc.write_manifest(manifest(jobs(4)))  # two more shots, submitted on host B
    result = afc("submit", "manifest.yaml", "--storage", storage, env=B)
    assert result.returncode == 2, result.stderr
    said = " ".join(result.stderr.split())
    assert "on this host (host-b) is not the one its runs on host-a store in" in said, said
    assert "Running on several machines" in said and "Traceback" not in said
    # nothing admitted, rendered or stored on B's disk
    assert afc.rows("SELECT COUNT(*) FROM jobs")[0][0] == 2 and _calls(afc) == 2
    assert not list(out.rglob("*.png"))

    # admitted without a run (an admission stores nothing), then run: a resume is refused,
    # and so is a worker's round
    assert afc("submit", "manifest.yaml", "--storage", storage, "--no-run", env=B).returncode == 0
    assert afc("resume", env=B).returncode == 2
    worker = afc("worker", "--until-idle", env=B)
    assert "is not the one its runs on host-a store in" in " ".join(worker.stderr.split())
    assert _calls(afc) == 2 and not list(out.rglob("*.png"))

    # the batch's mark written into the folder (its outputs copied here on purpose): let through
    mark = (afc.cwd / "out-on-host-a/.afc-folder").read_text().strip()
    assert f"printf {mark} > {out}/.afc-folder" in said
    subprocess.run(f"printf {mark} > {out}/.afc-folder", shell=True, check=True)
    assert afc("submit", "manifest.yaml", "--storage", storage, env=B).returncode == 0
    assert _stored(afc) == 4 and len(list(out.rglob("*.png"))) == 2


def test_a_new_batchs_folder_made_on_another_host_is_refused(afc):
    """No output stored yet (the first run's job failed): the second host's run, finding the
    folder missing, made it on its own disk and stored there."""
    afc.write_manifest(manifest(jobs(1, fail=["invalid"])))
    storage = f"file://{afc.cwd}/out"
    assert afc("submit", "manifest.yaml", "--storage", storage, env=A).returncode == 1
    shutil.move(afc.cwd / "out", afc.cwd / "out-on-host-a")  # not mounted on host B

    afc.write_manifest(manifest([*jobs(1, fail=["invalid"]), *jobs(3)[1:]]))
    result = afc("submit", "manifest.yaml", "--storage", storage, env=B)
    assert result.returncode == 2, result.stderr
    assert "is not the one its runs on host-a store in" in " ".join(result.stderr.split())
    assert _calls(afc) == 1 and not list((afc.cwd / "out").rglob("*.png"))


def test_the_same_hosts_folder_replaced_after_outputs_were_stored_is_refused(afc):
    """A mount point left empty (the share not mounted): refused as a missing folder is."""
    afc.write_manifest(manifest(jobs(2)))
    storage = f"file://{afc.cwd}/out"
    assert afc("submit", "manifest.yaml", "--storage", storage, env=A).returncode == 0
    out = _other_hosts_folder(afc)
    afc.write_manifest(manifest(jobs(3)))
    result = afc("submit", "manifest.yaml", "--storage", storage, env=A)
    assert result.returncode == 2, result.stderr
    said = " ".join(result.stderr.split())
    assert "is not the folder where 2 outputs of batch b1 were stored" in said, said
    assert _calls(afc) == 2 and not list(out.rglob("*.png"))

    # gone altogether: refused as ever, and the way out it says (the outputs moved away on
    # purpose) is let through
    shutil.rmtree(out)
    result = afc("submit", "manifest.yaml", "--storage", storage, env=A)
    assert result.returncode == 2
    said = " ".join(result.stderr.split())
    mark = (afc.cwd / "out-on-host-a/.afc-folder").read_text().strip()
    remedy = f"create the folder and write the batch's mark into it: printf {mark} > {out}/"
    assert remedy in said, said
    out.mkdir()
    subprocess.run(f"printf {mark} > {out}/.afc-folder", shell=True, check=True)
    assert afc("submit", "manifest.yaml", "--storage", storage, env=A).returncode == 0
    assert _stored(afc) == 3 and len(list(out.rglob("*.png"))) == 1


def test_the_same_hosts_folder_with_nothing_stored_yet_takes_the_new_mark(afc):
    afc.write_manifest(manifest(jobs(1, fail=["invalid"])))
    storage = f"file://{afc.cwd}/out"
    assert afc("submit", "manifest.yaml", "--storage", storage, env=A).returncode == 1
    shutil.rmtree(afc.cwd / "out")  # nothing of the batch's was in it
    afc.write_manifest(manifest([*jobs(1, fail=["invalid"]), *jobs(3)[1:]]))
    assert afc("submit", "manifest.yaml", "--storage", storage, env=A).returncode in (0, 1)
    assert _stored(afc) == 2
    new = (afc.cwd / "out/.afc-folder").read_text().strip()
    assert afc.rows("SELECT storage_mark, storage_mark_host FROM batches") == [(new, "host-a")]


def test_a_shared_folder_holds_one_mark_for_every_host(afc):
    afc.write_manifest(manifest(jobs(2)))
    storage = f"file://{afc.cwd}/out"
    assert afc("submit", "manifest.yaml", "--storage", storage, "--no-run", env=A).returncode == 0
    assert afc("worker", "--until-idle", env=B).returncode == 0
    afc.write_manifest(manifest(jobs(4)))
    assert afc("submit", "manifest.yaml", "--storage", storage, env=A).returncode == 0
    assert _stored(afc) == 4
    mark = (afc.cwd / "out/.afc-folder").read_text().strip()
    assert afc.rows("SELECT storage_mark, storage_mark_host FROM batches") == [(mark, "host-b")]


def test_an_output_key_may_not_be_the_folders_mark(afc):
    data = manifest([{"key": ".afc-folder", "prompt": "p"}])
    data["defaults"]["output"] = "{key}"
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml", "--storage", f"file://{afc.cwd}/out")
    assert result.returncode == 2
    assert ".afc-folder is reserved for the storage folder's mark" in result.stderr


def test_workers_of_two_hosts_on_a_postgresql_ledger(afc, pg_url):
    """The case the mark is for: workers on several machines sharing one PostgreSQL ledger,
    the batch's folder not mounted on one of them."""
    afc.env["AFC_LEDGER"] = pg_url
    host_a = {**A, "AFC_TEST_FINGERPRINT": "a", "AFC_SPOOL_DIR": str(afc.cwd / "spool-a")}
    host_b = {**B, "AFC_TEST_FINGERPRINT": "b", "AFC_SPOOL_DIR": str(afc.cwd / "spool-b")}
    storage = f"file://{afc.cwd}/out"
    afc.write_manifest(manifest(jobs(2)))
    assert afc("submit", "manifest.yaml", "--storage", storage, "--no-run").returncode == 0
    assert afc("worker", "--until-idle", env=host_a).returncode == 0
    out = _other_hosts_folder(afc)
    afc.write_manifest(manifest(jobs(4)))
    assert afc("submit", "manifest.yaml", "--storage", storage, "--no-run").returncode == 0

    worker = afc("worker", "--until-idle", env=host_b)
    assert "is not the one its runs on host-a store in" in " ".join(worker.stderr.split())
    assert not list(out.rglob("*.png"))
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        (calls,) = conn.execute("SELECT COUNT(*) FROM attempts").fetchone()
        done = conn.execute("SELECT status, COUNT(*) FROM jobs GROUP BY status").fetchall()
    assert calls == 2 and dict(done) == {"succeeded": 2, "queued": 2}


def test_a_batch_stored_before_marks_is_marked_by_a_folder_holding_its_outputs(afc):
    """A ledger upgraded past m028: its batch has outputs and no mark. A host whose folder of
    the path holds none of them records nothing (it would have made the hosts holding them
    be refused as another folder); the first run where they are records its mark."""
    import sqlite3

    afc.write_manifest(manifest(jobs(2)))
    storage = f"file://{afc.cwd}/out"
    assert afc("submit", "manifest.yaml", "--storage", storage, env=A).returncode == 0
    with sqlite3.connect(afc.cwd / "afc.db") as conn:  # as an earlier afc left it: no mark
        conn.execute("UPDATE batches SET storage_mark = NULL, storage_mark_host = NULL")
    (afc.cwd / "out/.afc-folder").unlink()
    shutil.move(afc.cwd / "out", afc.cwd / "out-on-host-a")
    (afc.cwd / "out").mkdir()  # host B's own folder of the path

    failing = {"key": "shot-x", "prompt": "p", "params": {"fail": ["invalid"]}}
    afc.write_manifest(manifest([*jobs(2), failing]))  # a run there that stores nothing
    assert afc("submit", "manifest.yaml", "--storage", storage, env=B).returncode == 1
    assert afc.rows("SELECT storage_mark FROM batches") == [(None,)]  # (as before marks)

    shutil.move(afc.cwd / "out", afc.cwd / "out-on-host-b")
    shutil.move(afc.cwd / "out-on-host-a", afc.cwd / "out")  # host A again
    afc.write_manifest(manifest([*jobs(3), failing]))
    assert afc("submit", "manifest.yaml", "--storage", storage, env=A).returncode == 1
    mark = (afc.cwd / "out/.afc-folder").read_text().strip()
    assert afc.rows("SELECT storage_mark, storage_mark_host FROM batches") == [(mark, "host-a")]
    assert _stored(afc) == 3


def test_a_mark_file_that_holds_no_mark_is_not_the_batchs_folder(afc):
    """A folder put in the batch's folder's place whose mark file is damaged (or written by
    hand) let the batch through: nothing held it to the folder."""
    afc.write_manifest(manifest(jobs(2)))
    storage = f"file://{afc.cwd}/out"
    assert afc("submit", "manifest.yaml", "--storage", storage, env=A).returncode == 0
    out = _other_hosts_folder(afc)
    (out / ".afc-folder").write_text("{}")
    afc.write_manifest(manifest(jobs(3)))
    result = afc("submit", "manifest.yaml", "--storage", storage, env=B)
    assert result.returncode == 2
    assert "its .afc-folder file holds no mark afc wrote" in " ".join(result.stderr.split())
    assert not list(out.rglob("*.png"))
    # nor is it recorded for a batch of no mark yet
    afc.write_manifest(manifest(jobs(1)), "other.yaml")
    other = (afc.cwd / "other.yaml").read_text().replace("batch: b1", "batch: b2")
    (afc.cwd / "other.yaml").write_text(other)
    assert afc("submit", "other.yaml", "--storage", storage, env=B).returncode == 0
    assert afc.rows("SELECT storage_mark FROM batches WHERE name = 'b2'") == [(None,)]
