"""Manifests, job lists and re-submits, end to end through ``afc`` (outside audit 23f)."""

from __future__ import annotations

import pytest
from conftest import ledger_count, manifest


@pytest.mark.parametrize("first", ["x/a.png", "x/a.png/b.png"])
def test_a_second_manifest_nesting_an_output_key_in_an_admitted_one_is_refused(
    afc, ledger_url, first
):
    """Found by outside audit 23f: one manifest giving two jobs ``x/a.png`` and
    ``x/a.png/b.png`` is refused (a file cannot also be a folder: one render would be paid
    for and never stored), but two manifests of one batch did it unrefused: the second
    submit ran both jobs, paid for both renders, and one ended OUTPUT_KEY_CONFLICT at store,
    its paid render never stored. Now refused at admission as an output key shared with an
    admitted job is (exit 2, naming the file, the job and the field, nothing admitted), and
    by ``afc plan`` alike, either way round."""
    afc.env["AFC_LEDGER"] = ledger_url
    second = "x/a.png/b.png" if first == "x/a.png" else "x/a.png"
    afc.write_manifest(manifest([{"key": "a", "prompt": "one", "output": first}]), "one.yaml")
    assert afc("submit", "one.yaml", "--no-run").returncode == 0
    afc.write_manifest(
        manifest(
            [{"key": "c", "prompt": "three"}, {"key": "b", "prompt": "two", "output": second}]
        ),
        "two.yaml",
    )

    plan = afc("plan", "two.yaml")
    assert plan.returncode == 2, plan.stdout + plan.stderr
    result = afc("submit", "two.yaml")
    assert result.returncode == 2, result.stderr
    said = "lies inside job 'a''s" if first == "x/a.png" else "is a folder of job 'a''s"
    assert "two.yaml" in result.stderr, result.stderr
    assert f"job 'b': field 'output': output key {second!r} {said}" in result.stderr
    assert said in plan.stderr, plan.stderr
    assert "Traceback" not in result.stderr
    assert ledger_count(afc, ledger_url, "SELECT COUNT(*) FROM jobs") == 1, "nothing admitted"
    assert ledger_count(afc, ledger_url, "SELECT COUNT(*) FROM attempts") == 0, "nothing paid"

    # a job of its own output key elsewhere is admitted beside it, and both run
    afc.write_manifest(
        manifest(
            [{"key": "c", "prompt": "three"}, {"key": "b", "prompt": "two", "output": "y/b.png"}]
        ),
        "two.yaml",
    )
    assert afc("submit", "two.yaml").returncode == 0
    assert ledger_count(afc, ledger_url, "SELECT COUNT(*) FROM attempts") == 3
