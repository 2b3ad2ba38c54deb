"""'afc retry' of a job whose rejected need is one of its reference images (a ``job`` input)
told the user to "submit this job again needing the key that replaces it". Its inputs are
part of its request hash, so that submit was refused as an IDEMPOTENCY_CONFLICT (exit 3) and
the job stayed failing at every run: the way out is a new key of its own (as the job's own
DEPENDENCY_FAILED message says). A need named in ``needs`` only is a gate, which a re-submit
changes on a job not yet rendered: that advice stays for it."""

from __future__ import annotations

from conftest import manifest


def test_a_retried_job_whose_rejected_need_is_its_input_is_told_to_take_a_new_key(afc):
    afc.write_manifest(
        manifest(
            [
                {"key": "style", "prompt": "a style frame", "review": True},
                {"key": "shot", "prompt": "a shot", "inputs": [{"job": "style"}]},
                {"key": "gate", "prompt": "a card", "needs": ["style"]},
            ]
        )
    )
    assert afc("submit", "manifest.yaml").returncode == 0
    assert afc("review", "reject", "style", "--reason", "too dark").returncode == 0

    retried = afc("retry", "shot", "gate")
    assert retried.returncode == 0, retried.stderr
    said = {
        line.removeprefix("afc: ").split(":", 1)[0]: line for line in retried.stderr.splitlines()
    }
    assert "needing the key that replaces it" not in said["b1/shot"], retried.stderr
    assert "new key of its own" in said["b1/shot"], retried.stderr
    # a need named in needs alone: a re-submit may change it (a gate), as before
    assert "submit this job again needing the key that replaces it" in said["b1/gate"]

    afc("cancel", "shot", "gate")
    out = afc.json("retry", "shot", "gate")
    by_key = {item["key"]: item for item in out["retried"]}
    assert by_key["shot"]["ended_needs"] == [{"key": "style", "status": "rejected", "input": True}]
    assert by_key["gate"]["ended_needs"] == [{"key": "style", "status": "rejected"}]

    # what the old advice led to: the same key naming the replacing job is refused (exit 3)
    afc.write_manifest(
        manifest(
            [
                {"key": "style", "prompt": "a style frame", "review": True},
                {"key": "style-2", "prompt": "a style frame, warmer", "review": True},
                {"key": "shot", "prompt": "a shot", "inputs": [{"job": "style-2"}]},
                {"key": "gate", "prompt": "a card", "needs": ["style-2"]},
            ]
        )
    )
    again = afc("submit", "manifest.yaml")
    assert again.returncode == 3, again.stderr
    assert "key 'shot'" in again.stderr and "key 'gate'" not in again.stderr
