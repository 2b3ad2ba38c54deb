"""Outside audit 46a: a reference image (a ``job`` input) deleted from storage after its job
was approved fails the jobs that send it (INPUT_UNAVAILABLE, nothing sent) saying "restore it,
then 'afc retry shot'", and nothing else. A person without a copy (an outputs folder cleaned
up) tried what is left, 'afc retry frame', and was refused: "it succeeded: its output is
stored, and afc never pays for it again". The same input changed in storage names the way out
without its bytes (a new key for the need, and one for the job naming it); gone, it does too.
"""

from __future__ import annotations

from conftest import manifest


def test_a_reference_gone_from_storage_names_the_way_out_without_its_bytes(afc):
    afc.write_manifest(
        manifest(
            [
                {"key": "frame", "prompt": "a style frame", "review": True},
                {"key": "shot", "prompt": "a shot", "inputs": [{"job": "frame"}]},
            ]
        )
    )
    assert afc("submit", "manifest.yaml").returncode == 0
    assert afc("review", "approve", "frame").returncode == 0
    (afc.outputs() / "b1" / "frame.png").unlink()

    run = afc("resume")
    assert run.returncode == 1, run.stderr
    ((code, message),) = afc.rows("SELECT error_code, error_message FROM jobs WHERE key = 'shot'")
    assert code == "INPUT_UNAVAILABLE"
    assert "is gone from storage: restore it, then 'afc retry shot'" in message, message
    assert "a new key for 'frame', and one for this job naming it" in message, message
    assert afc.rows("SELECT COUNT(*) FROM attempts")[0][0] == 1  # the frame's alone

    # the need itself is not rendered again by a retry: the way the message names is the one
    refused = afc("retry", "frame")
    assert refused.returncode == 2 and "it succeeded" in refused.stderr, refused.stderr
