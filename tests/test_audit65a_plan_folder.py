"""Outside audit 65a: 'afc plan' on a host whose ``file://`` folder the submit refuses.

The submit refuses a folder that is not the batch's (``run.hold_folder``: another host's own
folder of the path, or on the same host a folder put in place of the one its outputs are in)
and a folder gone that held outputs (``run.refuse_gone``), exit 2. Its plan said nothing of
either: 'to_render: 2', an estimated spend, no problem, exit 0. Now the plan says the submit's
refusal in ``environment`` (read only: no folder made, no mark written), exit 0 as for a
missing API key. Hosts are stood for by ``AFC_HOST_ID``, as in tests/test_folder_mark.py."""

from __future__ import annotations

import json
import shutil

from conftest import jobs, manifest

A = {"AFC_HOST_ID": "host-a"}
B = {"AFC_HOST_ID": "host-b"}


def _said(text: str) -> str:
    return " ".join(text.split())


def _plan(afc, storage: str, env: dict) -> dict:
    result = afc("plan", "manifest.yaml", "--storage", storage, "--json", env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_plan_on_another_hosts_folder_says_the_submit_is_refused(afc):
    afc.write_manifest(manifest(jobs(2)))
    storage = f"file://{afc.cwd}/out"
    assert afc("submit", "manifest.yaml", "--storage", storage, env=A).returncode == 0
    shutil.move(afc.cwd / "out", afc.cwd / "out-on-host-a")
    out = afc.cwd / "out"
    out.mkdir()  # host B's own folder of the path: the share not mounted there

    afc.write_manifest(manifest(jobs(4)))
    planned = _plan(afc, storage, B)
    said = _said(" ".join(planned["environment"]))
    assert "on this host (host-b) is not the one its runs on host-a store in" in said, planned
    assert not (out / ".afc-folder").exists(), "the plan wrote a mark"
    submitted = afc("submit", "manifest.yaml", "--storage", storage, env=B)
    assert submitted.returncode == 2
    assert _said(submitted.stderr).startswith(f"afc: {said}") or said in _said(submitted.stderr)

    # on host A, that folder (another mark, or none) holding none of the 2 stored outputs
    said_a = _said(" ".join(_plan(afc, storage, A)["environment"]))
    assert f"{out} is not the folder where 2 outputs of batch" in said_a, said_a
    assert afc("submit", "manifest.yaml", "--storage", storage, env=A).returncode == 2

    # the batch's folder back: nothing said, and nothing refused
    shutil.rmtree(out)
    shutil.move(afc.cwd / "out-on-host-a", out)
    assert _plan(afc, storage, B)["environment"] == []
    assert afc("submit", "manifest.yaml", "--storage", storage, env=B).returncode == 0


def test_a_plan_on_a_folder_gone_says_the_submit_is_refused_and_makes_none(afc):
    afc.write_manifest(manifest(jobs(1)))
    storage = f"file://{afc.cwd}/out"
    assert afc("submit", "manifest.yaml", "--storage", storage, env=A).returncode == 0
    shutil.move(afc.cwd / "out", afc.cwd / "elsewhere")  # a share not mounted

    afc.write_manifest(manifest(jobs(2)))
    said = _said(" ".join(_plan(afc, storage, A)["environment"]))
    assert f"{afc.cwd}/out does not exist, though 1 output of batch" in said, said
    assert not (afc.cwd / "out").exists(), "the plan made the folder"
    submitted = afc("submit", "manifest.yaml", "--storage", storage, env=A)
    assert submitted.returncode == 2 and said in _said(submitted.stderr), submitted.stderr
