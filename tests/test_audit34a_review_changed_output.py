"""An approval refuses a job awaiting review whose stored output is no longer of the size it
was verified with (edited in place, cut short), and said to render it again with "'afc cancel
KEY' then 'afc retry KEY'". That way does not render it: the object is still at the key,
tagged as this job's, so the retried job's probe took it as its own output, its verify read
it back wrong and failed it VERIFY_FAILED (and every job needing it DEPENDENCY_FAILED), with
a second message to delete the object first. The refusal now names what to delete (the
object, and a folder's metadata file beside it) before the cancel and retry, and following
it renders the job again. A deleted output keeps its advice (cancel, then retry)."""

from __future__ import annotations

import re

from conftest import manifest


def status(afc, key: str) -> str:
    return afc.rows("SELECT status FROM jobs WHERE key = ?", (key,))[0][0]


def test_an_output_changed_in_storage_is_refused_with_a_way_that_renders_it_again(afc):
    afc.write_manifest(
        manifest(
            [
                {"key": "frame", "prompt": "the style frame", "review": True},
                {"key": "shot", "prompt": "the shot", "inputs": [{"job": "frame"}]},
            ]
        )
    )
    assert afc("submit", "manifest.yaml").returncode == 0
    [(key,)] = afc.rows("SELECT output_key FROM jobs WHERE key = 'frame'")
    output = afc.outputs() / key
    output.write_bytes(output.read_bytes() + b"edited")  # saved over in place

    refused = afc("review", "approve", "frame")
    assert refused.returncode == 2, refused.stderr
    assert "not the" in refused.stderr and "it was verified with" in refused.stderr
    said = " ".join(refused.stderr.split())
    assert f"delete {output} and its metadata {output}.afc.json" in said, refused.stderr
    assert re.search(r"then 'afc cancel frame' and 'afc retry frame'", said), refused.stderr
    assert status(afc, "frame") == "awaiting_review"

    # the way it names: delete what it names, cancel, retry, run: rendered again
    output.unlink()
    (output.parent / (output.name + ".afc.json")).unlink()
    for args in (("cancel", "frame", "--yes"), ("retry", "frame"), ("resume",)):
        done = afc(*args)
        assert done.returncode == 0, (args, done.stderr)
    assert status(afc, "frame") == "awaiting_review", afc("status", "--all").stdout
    assert (
        afc.rows(
            "SELECT COUNT(*) FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE j.key = 'frame'"
        )[0][0]
        == 2
    )
    approved = afc("review", "approve", "frame")
    assert approved.returncode == 0, approved.stderr
    assert afc("resume").returncode == 0
    assert status(afc, "shot") == "succeeded"


def test_the_old_way_fails_the_job_verify_failed(afc):
    """What the old advice led to, kept true: a retry alone finds the job's own object."""
    afc.write_manifest(manifest([{"key": "frame", "prompt": "the style frame", "review": True}]))
    assert afc("submit", "manifest.yaml").returncode == 0
    [(key,)] = afc.rows("SELECT output_key FROM jobs WHERE key = 'frame'")
    output = afc.outputs() / key
    output.write_bytes(output.read_bytes() + b"edited")
    for args in (("cancel", "frame", "--yes"), ("retry", "frame")):
        assert afc(*args).returncode == 0
    assert afc("resume").returncode == 1
    assert afc.rows("SELECT error_code FROM jobs WHERE key = 'frame'")[0][0] == "VERIFY_FAILED"
