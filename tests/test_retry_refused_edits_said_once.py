"""``afc retry`` of many jobs whose edited requests a submit refused: said once, not twice per
job."""

from __future__ import annotations

from conftest import manifest


def test_many_refused_edits_are_said_in_one_line(afc):
    """A batch's prompts edited to fix a refusal, refused as conflicts by the next submit, then
    retried together: each retried job had its 'queued again' line and a second line on its
    refused edit, so a retry of 20,000 jobs wrote 40,001 lines. Beyond a handful, the refused
    edits are said in one line naming the first keys and how many more; a few are still said
    beside their jobs (tests/test_audit55a_retry_refused_edit.py), and --json keeps each."""
    data = manifest(
        [
            {"key": f"k{i:02d}", "prompt": f"p{i}", "params": {"fail": ["invalid"]}}
            for i in range(12)
        ]
    )
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 1
    for job in data["jobs"]:
        job["prompt"] += " fixed"
    afc.write_manifest(data)
    assert afc("submit", "manifest.yaml").returncode == 3

    result = afc("retry", "--batch", "b1", "--failed", "--yes")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert sum("queued again" in line for line in lines) == 12, result.stderr
    assert not any("the retry renders the request admitted" in line for line in lines)
    said = [line for line in lines if "not the ones a submit refused as conflicts" in line]
    assert len(said) == 1, result.stderr
    assert said[0].startswith("afc: 12 retried jobs render the requests admitted"), said
    assert "b1/k00, b1/k01," in said[0] and "b1/k09 and 2 more" in said[0], said
    assert len(lines) <= 12 + 3, result.stderr

    afc("cancel", "--batch", "b1", "--yes")
    again = afc.json("retry", "--batch", "b1", "--cancelled", "--yes")
    assert all(entry["refused_edit"]["changes"] for entry in again["retried"])
    assert len(again["retried"]) == 12
