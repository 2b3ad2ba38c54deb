"""Outside audit 64g: a chain entry's ``fallback_on`` is a set of reasons (the chain moves on
when the attempts' reasons meet it: ``afc_cli/attempts.py``), but the request hash took the
list as written. A re-submit whose only edit was its order (``[unavailable, exhausted]``
written ``[exhausted, unavailable]``, a reason written twice, or the defaults' chain tidied
up) was refused as an ``IDEMPOTENCY_CONFLICT`` of every job of the chain (exit 3), each
'changed chain[0].fallback_on[0]: "unavailable" -> "exhausted"', and told to use a new key:
the way out offered paid for every render again, for the very same requests. The reasons are
kept in one order now (exhausted, unavailable, refusal, window_expired), each once, so the
edit is a replay; a body an earlier afc admitted in another order replays too
(``manifest.restated``)."""

from __future__ import annotations

import json

from conftest import jobs, manifest, old_build

BEFORE_FIX = "9f6b0f3"  # the afc that hashed fallback_on as written


def _chain(fallback_on: list[str]) -> list[dict]:
    return [
        {
            "provider": "local",
            "model": "m1",
            "attempts": 2,
            "backoff": {"base": 0.01, "cap": 0.05},
            "fallback_on": fallback_on,
        },
        {"provider": "local", "model": "m2", "attempts": 1},
    ]


def _with(fallback_on: list[str], n: int = 3) -> dict:
    data = manifest(jobs(n))
    data["defaults"]["chain"] = _chain(fallback_on)
    data["rates"].append({"provider": "local", "model": "m2", "per_image": "0.05"})
    return data


def test_reordered_fallback_reasons_are_the_same_request(afc):
    calls = afc.cwd / "calls.log"
    env = {"AFC_LOCAL_CALL_LOG": str(calls)}
    afc.write_manifest(_with(["unavailable", "exhausted"]))
    first = afc("submit", "manifest.yaml", env=env)
    assert first.returncode == 0, first.stderr
    assert len(calls.read_text().splitlines()) == 3

    for written in (["exhausted", "unavailable"], ["unavailable", "exhausted", "unavailable"]):
        afc.write_manifest(_with(written))
        plan = afc.json("plan", "manifest.yaml")
        assert plan["conflicts"] == [], plan["conflicts"]
        again = afc("submit", "manifest.yaml", "--json", env=env)
        assert again.returncode == 0, again.stderr
        assert "IDEMPOTENCY_CONFLICT" not in again.stderr, again.stderr
        said = json.loads(again.stdout)
        assert said["admitted"] == {"new": 0, "replayed": 3, "conflicts": 0}, said["admitted"]
    assert len(calls.read_text().splitlines()) == 3  # nothing rendered (or paid) again

    # a reason added or taken away is still a changed request
    afc.write_manifest(_with(["exhausted", "unavailable", "refusal"]))
    changed = afc("submit", "manifest.yaml")
    assert changed.returncode == 3, changed.stderr
    assert "changed chain[0].fallback_on" in changed.stderr, changed.stderr


def test_a_body_admitted_in_another_order_by_an_earlier_afc_replays(afc, tmp_path):
    old_env = {"PYTHONPATH": str(old_build(BEFORE_FIX, tmp_path / "old-build"))}
    afc.write_manifest(_with(["window_expired", "unavailable", "exhausted"], n=2))
    ran = afc("submit", "manifest.yaml", env=old_env)
    assert ran.returncode == 0, ran.stderr
    admitted = afc.rows("SELECT request_json FROM jobs")
    assert all('"window_expired","unavailable","exhausted"' in row[0] for row in admitted)

    calls = afc.cwd / "calls.log"
    env = {"AFC_LOCAL_CALL_LOG": str(calls)}
    for written in (
        ["window_expired", "unavailable", "exhausted"],
        ["exhausted", "unavailable", "window_expired"],
    ):
        afc.write_manifest(_with(written, n=2))
        again = afc("submit", "manifest.yaml", env=env)
        assert again.returncode == 0, again.stderr
        assert "IDEMPOTENCY_CONFLICT" not in again.stderr, again.stderr
    assert not calls.exists()  # nothing rendered again

    # a real edit of such a job names what changed, not the reasons' order
    data = _with(["exhausted", "unavailable", "window_expired"], n=2)
    data["jobs"][0]["prompt"] = "another prompt"
    afc.write_manifest(data)
    edited = afc("submit", "manifest.yaml")
    assert edited.returncode == 3, edited.stderr
    assert "key 'shot-001' changed prompt" in edited.stderr, edited.stderr
    assert "fallback_on" not in edited.stderr, edited.stderr


def test_jobs_using_such_a_job_as_an_input_replay_too(afc, tmp_path):
    """A job's ``job`` input names its need's request hash in its own body: the need, restated,
    has another hash now than the one its users were admitted with, and those users were
    refused as 'changed inputs[0].job.request_hash' (exit 3), however unchanged."""
    old_env = {"PYTHONPATH": str(old_build(BEFORE_FIX, tmp_path / "old-build"))}
    data = _with(["unavailable", "exhausted"], n=0)
    data["jobs"] = [
        {"key": "style", "prompt": "the style frame"},
        {"key": "shot", "prompt": "a shot", "inputs": [{"job": "style"}]},
        {"key": "final", "prompt": "the last", "inputs": [{"job": "shot"}, {"job": "style"}]},
    ]
    afc.write_manifest(data)
    ran = afc("submit", "manifest.yaml", env=old_env)
    assert ran.returncode == 0, ran.stderr

    calls = afc.cwd / "calls.log"
    plan = afc.json("plan", "manifest.yaml")
    assert plan["conflicts"] == [], plan["conflicts"]
    again = afc("submit", "manifest.yaml", "--json", env={"AFC_LOCAL_CALL_LOG": str(calls)})
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["admitted"] == {"new": 0, "replayed": 3, "conflicts": 0}
    assert not calls.exists()

    data["jobs"][2]["prompt"] = "the very last"  # a real edit is still refused
    afc.write_manifest(data)
    edited = afc("submit", "manifest.yaml")
    assert edited.returncode == 3, edited.stderr
    assert "key 'final' changed" in edited.stderr, edited.stderr
    assert "key 'shot'" not in edited.stderr, edited.stderr
