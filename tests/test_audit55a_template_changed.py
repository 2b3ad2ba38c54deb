"""An output template changed between nights, end to end through ``afc`` (an outside audit):
a stored job whose new template would put its output inside, or over, the output it has is a
conflict (the template is part of its request), and its admitted output key is the one a run
writes. The submit's storage check read the manifest's new key for it instead, and refused
the whole submit (exit 2, nothing admitted, the new jobs not run) telling the user to move
the job's stored output, while ``afc plan`` said the same manifest would render the new job
and refuse the changed one."""

from __future__ import annotations

import pytest
from conftest import ledger_count, manifest


@pytest.mark.parametrize(
    ("before", "after"),
    [
        # the new key lies inside the stored output (a file where a folder is needed)
        ("{batch}/{key}", "{batch}/{key}/v2.{ext}"),
        # the new key is the folder the stored output lies in
        ("{batch}/{key}/v1.{ext}", "{batch}/{key}"),
    ],
)
def test_a_stored_job_whose_new_template_nests_with_its_output_is_a_conflict(
    afc, ledger_url, before, after
):
    afc.env["AFC_LEDGER"] = ledger_url
    data = manifest([{"key": "a", "prompt": "a cat"}])
    data["defaults"]["output"] = before
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 0

    data["defaults"]["output"] = after
    data["jobs"].append({"key": "c", "prompt": "a fox"})
    afc.write_manifest(data)
    plan = afc.json("plan", "manifest.yaml")
    assert (plan["conflicting"], plan["to_render"]) == (1, 1)

    result = afc("submit", "manifest.yaml")
    assert result.returncode == 3, result.stderr
    assert "IDEMPOTENCY_CONFLICT: key 'a' changed output" in result.stderr
    assert "is a file, not a folder" not in result.stderr
    status = {job["key"]: job for job in afc.json("status", "--all")["jobs"]}
    assert status["c"]["status"] == "succeeded"
    assert status["a"]["status"] == "succeeded"
    assert status["a"]["output_key"] == before.format(batch="b1", key="a", ext="png")
    assert ledger_count(afc, ledger_url, "SELECT COUNT(*) FROM attempts") == 2
