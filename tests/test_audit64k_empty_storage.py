"""Outside audit 64k, the command line: an empty storage named on purpose. A script that
passes its bucket as ``--storage "$AFC_BUCKET"`` (or ``--storage=$S3_URL``) with the variable
left unset, or a manifest templated with ``storage: "${STORE}"`` and the variable unset, gave
afc an empty storage. It was read as no storage at all: the batch was rendered, paid for and
bound to the manifest's storage or the default ``file://./afc-outputs`` on this machine's disk
(exit 0), and the run with the bucket named afterwards was refused as another storage. An
empty ``--ledger=`` has long been refused for the same reason (README "The ledger file").
Now an empty ``--storage`` (submit, plan, resume, worker) and an empty ``storage:`` in a
manifest are refused, exit 2, nothing written or rendered; an empty ``AFC_STORAGE`` is still
as if unset, as an empty ``AFC_LEDGER`` is. Through the real afc command."""

from __future__ import annotations

import pytest

from tests.conftest import jobs, manifest


@pytest.mark.parametrize(
    "args",
    [
        ["submit", "manifest.yaml", "--storage", ""],
        ["submit", "manifest.yaml", "--storage="],
        ["plan", "manifest.yaml", "--storage", ""],
        ["submit", "manifest.yaml", "--dry-run", "--storage="],
    ],
)
def test_an_empty_storage_option_is_refused_before_anything_is_written(afc, args):
    afc.write_manifest(manifest(jobs(2)))
    result = afc(*args, "--json")
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert result.stdout == ""
    assert "--storage is empty" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not (afc.cwd / "afc.db").exists()
    assert not afc.outputs().exists()


def test_an_empty_storage_option_on_resume_and_worker_is_refused(afc):
    afc.write_manifest(manifest(jobs(2)))
    admitted = afc("submit", "manifest.yaml", "--no-run")
    assert admitted.returncode == 0, admitted.stderr
    for args in (["resume"], ["worker", "--until-idle"]):
        result = afc(*args, "--storage", "")
        assert result.returncode == 2, (args, result.returncode, result.stderr)
        assert "--storage is empty" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    # nothing ran: both jobs still queued, nothing stored
    assert afc.rows("SELECT status, COUNT(*) FROM jobs GROUP BY status") == [("queued", 2)]
    assert not afc.outputs().exists()


def test_an_empty_storage_in_the_manifest_is_a_manifest_error(afc):
    afc.write_manifest(manifest(jobs(2), storage=""))
    for args in (["plan", "manifest.yaml"], ["submit", "manifest.yaml"]):
        result = afc(*args)
        assert result.returncode == 2, (args, result.returncode, result.stderr)
        assert "manifest.yaml" in result.stderr and "field 'storage'" in result.stderr, (
            result.stderr
        )
        assert "empty" in result.stderr
    assert not (afc.cwd / "afc.db").exists()
    assert not afc.outputs().exists()


def test_an_empty_afc_storage_is_as_if_unset(afc):
    # the environment's empty value is no storage named (as AFC_LEDGER's): the default
    afc.write_manifest(manifest(jobs(1)))
    result = afc("submit", "manifest.yaml", "--json", env={"AFC_STORAGE": ""})
    assert result.returncode == 0, result.stderr
    assert (afc.outputs() / "b1" / "shot-001.png").exists()
