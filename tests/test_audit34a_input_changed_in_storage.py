"""A reference image (a ``job`` input) whose stored object was changed in storage after its
job succeeded (a style frame edited in place after approval) fails the jobs that send it with
INPUT_UNAVAILABLE, nothing sent. The message named the two SHA-256s and no way out, where the
same input gone from storage says "restore it, then 'afc retry KEY'": the job that succeeded
is never rendered again, so restoring the verified bytes (then a retry) is the way, and the
message now says so, as it does for a deleted one."""

from __future__ import annotations

from conftest import manifest


def test_a_reference_changed_in_storage_names_the_way_out(afc):
    afc.write_manifest(
        manifest(
            [
                {"key": "style", "prompt": "a style frame", "review": True},
                {"key": "shot", "prompt": "a shot", "inputs": [{"job": "style"}]},
            ]
        )
    )
    assert afc("submit", "manifest.yaml").returncode == 0
    assert afc("review", "approve", "style").returncode == 0
    stored = afc.cwd / "afc-outputs" / "b1" / "style.png"
    verified = stored.read_bytes()
    edited = bytearray(verified)
    edited[-20] ^= 1  # same size: edited in place
    stored.write_bytes(bytes(edited))

    run = afc("resume")
    assert run.returncode == 1, run.stderr
    ((code, message),) = afc.rows("SELECT error_code, error_message FROM jobs WHERE key = 'shot'")
    assert code == "INPUT_UNAVAILABLE"
    assert "not the" in message and "it was verified with" in message, message
    assert "restore" in message and "'afc retry shot'" in message, message
    assert (
        afc.rows(
            "SELECT COUNT(*) FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE j.key = 'shot'"
        )[0][0]
        == 0
    )

    # the way it names works: the verified bytes back, a retry renders the shot
    stored.write_bytes(verified)
    assert afc("retry", "shot").returncode == 0
    assert afc("resume").returncode == 0
    assert dict(afc.rows("SELECT key, status FROM jobs"))["shot"] == "succeeded"
