"""Outside audit 57d: 'afc outputs' lists what the ledger recorded as stored, never looking at
storage again. Its --help and README said nothing of it: a producer handing the list to an edit
suite read an output deleted since (a person tidying the folder, a bucket's lifecycle rule) as
there. They say so now, and where the check is ('afc retry KEY')."""

from __future__ import annotations

from conftest import jobs, manifest


def test_outputs_lists_a_deleted_output_and_says_it_does_not_look(afc):
    afc.write_manifest(manifest(jobs(1)))
    assert afc("submit", "manifest.yaml").returncode == 0
    (afc.outputs() / "b1" / "shot-001.png").unlink()
    listed = afc.json("outputs")["outputs"]
    assert [o["key"] for o in listed] == ["shot-001"]  # still listed: the ledger's record
    shown = " ".join(afc("outputs", "--help").stdout.split())
    assert "storage is not looked at, so an output deleted since is still listed" in shown
    assert "'afc retry KEY' looks for a succeeded job's output" in shown
    retried = afc("retry", "shot-001")
    assert retried.returncode == 2
    assert "is no longer there" in retried.stderr
