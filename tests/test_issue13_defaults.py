"""The rule for defaults and the request hash (afc_cli/manifest.py's docstring): writing a
default out never changes the hash — afc's chain defaults are applied into the body, and a
provider param equal to the default the adapter fills in is left out of it."""

from __future__ import annotations

import json
import sqlite3

import yaml
from conftest import manifest

from afc_cli.manifest import load_manifest, request_hash

LOCAL = {"provider": "local", "model": "m1"}
LOCAL_SPELLED_OUT = {  # fallback_on is not written on a last entry (a manifest error)
    "provider": "local",
    "model": "m1",
    "attempts": 3,
    "backoff": {"base": 2, "cap": 60},
    "window_s": None,
}


def resolved(tmp_path, job, name="m.yaml", **top):
    data = {"version": 1, "batch": "b", "jobs": [{"key": "k", "prompt": "p", **job}], **top}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return load_manifest(path).jobs[0]


def test_the_rule_is_pinned(tmp_path):
    job = resolved(tmp_path, {"chain": [LOCAL]})
    assert job.body == {
        "chain": [
            LOCAL_SPELLED_OUT
            | {"fallback_on": ["exhausted"], "backoff": {"base": 2.0, "cap": 60.0}}
        ],
        "prompt": "p",
        "params": {},
        "output": "{batch}/{key}.{ext}",
    }
    # the hash of this body, pinned: a changed rule would turn every replay into a conflict
    assert job.request_hash == "34ff4d506a79cd736ebdde567daa9970f9b73438e4b13165af899e2f73f9df55"


def test_chain_defaults_written_out_hash_alike(tmp_path):
    omitted = resolved(tmp_path, {"chain": [LOCAL]})
    assert resolved(tmp_path, {"chain": [LOCAL_SPELLED_OUT]}).request_hash == omitted.request_hash
    # from defaults.chain or the job, with defaults.output spelled out: one body
    via_defaults = resolved(
        tmp_path, {}, defaults={"chain": [LOCAL_SPELLED_OUT], "output": "{batch}/{key}.{ext}"}
    )
    assert via_defaults.request_hash == omitted.request_hash
    # fallback_on written out on an entry that has a next model
    two = resolved(tmp_path, {"chain": [LOCAL, LOCAL | {"model": "m2"}]})
    two_spelled = resolved(
        tmp_path,
        {"chain": [LOCAL_SPELLED_OUT | {"fallback_on": ["exhausted"]}, LOCAL | {"model": "m2"}]},
    )
    assert two_spelled.request_hash == two.request_hash


def test_provider_param_defaults_written_out_hash_alike(tmp_path):
    omitted = resolved(tmp_path, {"chain": [LOCAL]})
    spelled = resolved(
        tmp_path,
        {
            "chain": [LOCAL],
            "params": {"size": "64x64", "latency_s": 0, "fail": [], "output_format": "png"},
        },
    )
    assert spelled.params == {} and spelled.request_hash == omitted.request_hash
    via_defaults = resolved(tmp_path, {"chain": [LOCAL]}, defaults={"params": {"size": "64x64"}})
    assert via_defaults.request_hash == omitted.request_hash
    # seconds defaults to latency_s: written out equal to it, it is the default
    slow = resolved(tmp_path, {"chain": [LOCAL], "params": {"latency_s": 0.5}})
    slow_spelled = resolved(
        tmp_path, {"chain": [LOCAL], "params": {"latency_s": 0.5, "seconds": 0.5}}
    )
    assert slow_spelled.request_hash == slow.request_hash != omitted.request_hash
    # a value other than the default is a different request
    other = resolved(tmp_path, {"chain": [LOCAL], "params": {"size": "32x32"}})
    assert other.request_hash != omitted.request_hash


def test_a_param_another_provider_of_the_chain_receives_is_kept(tmp_path):
    chain = [LOCAL, {"provider": "openai", "model": "gpt-image-1"}]
    job = resolved(tmp_path, {"chain": chain, "params": {"size": "64x64"}})
    assert job.params == {"size": "64x64"}  # openai would be sent it: not the same request
    assert job.request_hash != resolved(tmp_path, {"chain": chain}).request_hash


def test_explicit_defaults_replay_end_to_end(afc):
    data = manifest([{"key": "k", "prompt": "p"}])
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    data["jobs"][0]["params"] = {"size": "64x64", "fail": []}
    data["defaults"]["chain"][0]["window_s"] = None
    afc.write_manifest(data)
    again = afc.json("submit", "manifest.yaml")
    assert again["admitted"] == {"new": 0, "replayed": 1, "conflicts": 0}
    assert afc.json("plan", "manifest.yaml")["conflicting"] == 0


def test_a_body_admitted_before_the_rule_is_a_replay(afc):
    data = manifest([{"key": "k", "prompt": "p", "params": {"size": "64x64"}}])
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0
    # what an earlier afc stored: the default written out, in the body and the hash
    (body,) = afc.rows("SELECT request_json FROM jobs")[0]
    old = json.loads(body)
    old["params"] = {"size": "64x64"}
    conn = sqlite3.connect(afc.cwd / "afc.db")
    with conn:
        conn.execute(
            "UPDATE jobs SET request_json = ?, request_hash = ?",
            (json.dumps(old), request_hash(old)),
        )
    conn.close()
    again = afc.json("submit", "manifest.yaml")
    assert again["admitted"] == {"new": 0, "replayed": 1, "conflicts": 0}
    assert afc.json("plan", "manifest.yaml")["replayed"] == 1
    # a real change is still a conflict; the default written out then is not named as one
    data["jobs"][0]["prompt"] = "q"
    afc.write_manifest(data)
    changed = afc.json("submit", "manifest.yaml", expect=3)
    assert changed["conflicts"][0]["changes"] == [{"field": "prompt", "old": "p", "new": "q"}]
    assert afc.json("plan", "manifest.yaml")["conflicts"][0]["changes"] == [
        {"field": "prompt", "old": "p", "new": "q"}
    ]
