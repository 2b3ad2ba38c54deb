"""A reference file moved between nights, in the same edit as a prompt, end to end through
``afc`` (an outside audit). A file's path is not part of the request, and a re-submit makes a
job not yet rendered read it where the manifest names it now (README, inputs). A job whose
prompt the same manifest changed was refused as a conflict, told that 'the next run of the
batch renders it', and kept the old path: that run failed it, INPUT_UNAVAILABLE, 'restore
it, then afc retry', the file being where the manifest said."""

from __future__ import annotations

from conftest import manifest

from afc_cli.providers.local import render_png


def test_a_job_refused_as_a_conflict_reads_its_moved_input_where_the_manifest_names_it(
    afc, ledger_url
):
    afc.env["AFC_LEDGER"] = ledger_url
    (afc.cwd / "refs").mkdir()
    (afc.cwd / "refs" / "palette.png").write_bytes(render_png("palette", 16, 16))
    data = manifest([{"key": "a", "prompt": "a cat", "inputs": [{"path": "refs/palette.png"}]}])
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0

    (afc.cwd / "library").mkdir()
    (afc.cwd / "refs" / "palette.png").rename(afc.cwd / "library" / "palette.png")
    data["jobs"][0]["inputs"] = [{"path": "library/palette.png"}]
    data["jobs"][0]["prompt"] = "a tabby cat"
    afc.write_manifest(data)
    result = afc("submit", "manifest.yaml", "--no-run")
    assert result.returncode == 3, result.stderr
    assert "the next run of the batch renders it" in result.stderr

    resumed = afc("resume")
    assert resumed.returncode == 0, resumed.stderr
    story = afc.json("show", "a")
    assert story["job"]["status"] == "succeeded"
    assert story["request"]["prompt"] == "a cat"  # the admitted request, as the conflict said
