"""Outside audit 26e: a ledger an earlier afc admitted, re-submitted after an upgrade.

The afc before m003 (commit 84861f7, the last build of m002) wrote its chain entries without
``window_s``, which came with m003 (670e542) and which afc now writes into every entry (its
default, ``null``). A re-submit of the unchanged manifest by this afc found every admitted job's
hash changed and refused each as an idempotency conflict (exit 3, 'changed chain[0].window_s:
(not set) -> null'), the succeeded ones too: the nightly submit failed for good, and the way out
it offers (new keys) pays for every render again. ``manifest.restated`` gives such a body the
default, as it does a provider default written out.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import jobs, manifest, old_build

from afc_cli.manifest import load_manifest, request_hash, same_request

BEFORE_M003 = "84861f7"  # the last build before window_s (670e542)


def _m002_body(job) -> dict:
    """The body the afc before m003 admitted for ``job``: its chain entries without window_s."""
    body = json.loads(json.dumps(job.body))
    for entry in body["chain"]:
        entry.pop("window_s")
    return body


def test_a_body_admitted_before_window_s_is_the_same_request(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(json.dumps(manifest(jobs(1))))
    job = load_manifest(path).jobs[0]
    old = _m002_body(job)
    assert request_hash(old) != job.request_hash
    assert same_request(request_hash(old), json.dumps(old), job)
    # a window the manifest sets now is a change
    changed = json.loads(json.dumps(manifest(jobs(1))))
    changed["defaults"]["chain"][0]["window_s"] = 30
    path.write_text(json.dumps(changed))
    windowed = load_manifest(path).jobs[0]
    assert not same_request(request_hash(old), json.dumps(old), windowed)


def _old_build(tmp_path: Path) -> Path:
    return old_build(BEFORE_M003, tmp_path / "old-build")


def test_a_batch_the_afc_before_m003_ran_is_a_replay_after_the_upgrade(afc, tmp_path):
    """The real build before m003 renders two jobs and admits a third; this afc re-submits the
    same manifest: every job is a replay, nothing is paid again, the third is rendered once."""
    old_env = {"PYTHONPATH": str(_old_build(tmp_path))}
    afc.write_manifest(manifest(jobs(2)))
    ran = afc("submit", "manifest.yaml", env=old_env)
    assert ran.returncode == 0, ran.stderr
    afc.write_manifest(manifest(jobs(3)), name="more.yaml")
    admitted = afc("submit", "more.yaml", "--no-run", env=old_env)
    assert admitted.returncode == 0, admitted.stderr
    assert afc.rows("SELECT request_json FROM jobs WHERE request_json LIKE '%window_s%'") == []

    calls = afc.cwd / "calls.log"
    again = afc("submit", "more.yaml", "--json", env={"AFC_LOCAL_CALL_LOG": str(calls)})
    assert again.returncode == 0, again.stderr
    assert "conflict" not in again.stderr.lower(), again.stderr
    assert len(calls.read_text().splitlines()) == 1  # shot-003, admitted and never rendered
    assert afc.rows("SELECT key, status FROM jobs ORDER BY key") == [
        ("shot-001", "succeeded"),
        ("shot-002", "succeeded"),
        ("shot-003", "succeeded"),
    ]
