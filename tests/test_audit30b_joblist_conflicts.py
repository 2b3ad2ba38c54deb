"""Outside audit 30b (the maintainer's known item 'conflict messages for jobs_from jobs name
the key and field but not the file or line'): a job of a ``jobs_from`` list whose output key
another manifest of the batch admitted before is refused at admission (exit 2, nothing
admitted), and the refusal names the list's file and line, as every other problem of a
list's job does (README, "Big job lists"), not only its key."""

from __future__ import annotations

import json

import pytest
from conftest import ledger_count, manifest


def _listed(afc, name: str, data: str, manifest_name: str) -> None:
    top = manifest([], jobs_from=name)
    del top["jobs"]
    afc.write_manifest(top, name=manifest_name)
    (afc.cwd / name).write_text(data)


@pytest.mark.parametrize(
    ("name", "data", "line"),
    [
        (
            "more.jsonl",
            '{"key": "c", "prompt": "three"}\n\n{"key": "b", "prompt": "two", "output": "x/hero.png"}\n',
            3,
        ),
        ("more.csv", "key,prompt,output\nc,three,\nb,two,x/hero.png\n", 3),
    ],
    ids=["jsonl", "csv"],
)
def test_a_list_job_refused_for_an_admitted_output_key_is_named_by_file_and_line(
    afc, ledger_url, name, data, line
):
    if ledger_url.startswith("postgresql"):
        afc.env["AFC_LEDGER"] = ledger_url
    first = manifest([{"key": "a", "prompt": "one", "output": "x/hero.png"}])
    afc.write_manifest(first, name="one.yaml")
    assert afc("submit", "one.yaml", "--no-run").returncode == 0
    _listed(afc, name, data, "two.yaml")
    for command in (("submit", "two.yaml", "--no-run"), ("plan", "two.yaml")):
        result = afc(*command)
        assert result.returncode == 2, result.stderr
        assert (
            f"{name} line {line} (key 'b'): field 'output': output key 'x/hero.png' is job "
            "'a''s, admitted to batch 'b1' before" in result.stderr
        ), result.stderr
    # a key inside an admitted one is named the same way
    _listed(afc, name, data.replace("x/hero.png", "x/hero.png/b.png"), "three.yaml")
    result = afc("submit", "three.yaml", "--no-run")
    assert result.returncode == 2, result.stderr
    assert f"{name} line {line} (key 'b'): field 'output': output key 'x/hero.png/b.png' lies" in (
        result.stderr
    ), result.stderr
    url = ledger_url if ledger_url.startswith("postgresql") else ""
    assert ledger_count(afc, url, "SELECT COUNT(*) FROM jobs") == 1
    assert ledger_count(afc, url, "SELECT COUNT(*) FROM jobs WHERE key = 'a'") == 1


@pytest.mark.parametrize(
    ("name", "first", "second"),
    [
        (
            "jobs.jsonl",
            '{"key": "a", "prompt": "one"}\n\n{"key": "b", "prompt": "two"}\n',
            '{"key": "a", "prompt": "one"}\n\n{"key": "b", "prompt": "two, at dusk"}\n',
        ),
        (
            "jobs.csv",
            "key,prompt\na,one\nb,two\n",
            'key,prompt\na,one\nb,"two, at dusk"\n',
        ),
    ],
    ids=["jsonl", "csv"],
)
def test_a_list_job_whose_request_changed_is_named_by_file_and_line(
    afc, ledger_url, name, first, second
):
    """A key of a list submitted again with another request is an IDEMPOTENCY_CONFLICT
    (exit 3), its message naming the key and what changed; for a list's job, the line too."""
    if ledger_url.startswith("postgresql"):
        afc.env["AFC_LEDGER"] = ledger_url
    _listed(afc, name, first, "manifest.yaml")
    assert afc("submit", "manifest.yaml", "--no-run").returncode == 0
    (afc.cwd / name).write_text(second)
    result = afc("submit", "manifest.yaml", "--no-run")
    assert result.returncode == 3, result.stderr
    assert "IDEMPOTENCY_CONFLICT: key 'b' changed prompt" in result.stderr, result.stderr
    assert f"Key 'b' is {name} line 3.\n" in result.stderr, result.stderr
    # --json's conflicts keep their shape (the line is in the message on stderr)
    result = afc("submit", "manifest.yaml", "--no-run", "--json")
    assert result.returncode == 3, result.stderr
    [conflict] = json.loads(result.stdout)["conflicts"]
    assert set(conflict) == {
        "key",
        "stored_hash",
        "new_hash",
        "changes",
        "status",
        "inputs_changed",
    }, conflict
    assert f"Key 'b' is {name} line 3.\n" in result.stderr, result.stderr
