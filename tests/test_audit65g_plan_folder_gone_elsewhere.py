"""Outside audit 65g: 'afc plan' on a host without the folder another host's runs store in.

A batch whose runs on host A hold it to A's ``file://`` folder (its mark recorded, no output
stored yet: its jobs failed, or still render there), submitted on host B where that path does
not exist (the share not mounted): the submit makes the folder, its new mark is not the
batch's, and it is refused, exit 2 ('not the one its runs on host-a store in'). Its plan said
nothing of it ('environment' empty, the jobs priced to render), exit 0: ``plan.folder_problem``
looked no further than ``run.refuse_gone`` (which refuses a missing folder only where outputs
were stored). Hosts are stood for by ``AFC_HOST_ID``, as in tests/test_folder_mark.py."""

from __future__ import annotations

import json
import shutil

from conftest import jobs, manifest

A = {"AFC_HOST_ID": "host-a"}
B = {"AFC_HOST_ID": "host-b"}


def _said(text: str) -> str:
    return " ".join(text.split())


def test_a_plan_where_another_hosts_folder_is_missing_says_the_submit_is_refused(afc):
    afc.write_manifest(manifest(jobs(2, fail=["invalid"])))
    storage = f"file://{afc.cwd}/out"
    # host A's run: the batch held to its folder, no output stored (both jobs failed)
    assert afc("submit", "manifest.yaml", "--storage", storage, env=A).returncode == 1
    assert (afc.cwd / "out" / ".afc-folder").exists()
    shutil.move(afc.cwd / "out", afc.cwd / "out-on-host-a")  # host B: the share not mounted

    afc.write_manifest(manifest(jobs(3)))
    planned = afc("plan", "manifest.yaml", "--storage", storage, "--json", env=B)
    assert planned.returncode == 0, planned.stderr
    said = _said(" ".join(json.loads(planned.stdout)["environment"]))
    assert not (afc.cwd / "out").exists(), "the plan made the folder"
    submitted = afc("submit", "manifest.yaml", "--storage", storage, env=B)
    assert submitted.returncode == 2, submitted.stderr
    assert "is not the one its runs on host-a store in" in _said(submitted.stderr)
    assert "is not the one its runs on host-a store in" in said, said

    # on host A itself a missing folder with nothing stored is made anew, as the submit does
    shutil.rmtree(afc.cwd / "out")
    planned_a = afc("plan", "manifest.yaml", "--storage", storage, "--json", env=A)
    assert json.loads(planned_a.stdout)["environment"] == [], planned_a.stdout
