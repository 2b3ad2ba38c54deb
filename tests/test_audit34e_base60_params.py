"""Outside audit 34e: YAML 1.1 reads an unquoted ``16:9`` as the base-60 number 969 (``1:1``
is 61, ``1:30`` is 90). ``params: {aspect_ratio: 16:9}`` was admitted so, sent to the
provider as 969 (refused there, after the submit had reported the job new and rendering),
and the quoted fix, ``"16:9"``, was then a changed request under the same key: 'conflict a:
changed params.aspect_ratio: 969 -> "16:9"', the admitted 969 still rendered by the next run.
A param written as a base-60 number is now refused with the manifest's other problems,
naming the field, what YAML read and how to quote it; exit 2, nothing written."""

from __future__ import annotations

import pytest

from afc_cli.errors import ManifestError
from afc_cli.manifest import load_manifest

HEAD = "version: 1\nbatch: b1\ndefaults:\n  chain: [{provider: local, model: m1}]\n"


def test_a_param_yaml_reads_in_base_60_is_refused_naming_it(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(
        HEAD + "  params: {seed: 1:30}\n"
        "jobs:\n"
        "  - {key: a, prompt: x, params: {seed: 16:9}}\n"
        "  - {key: b, prompt: x}\n"
        "  - {key: c, prompt: x, params: {seed: 1:30.5}}\n"
    )
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert caught.value.problems == [
        "job 0 (key 'a'): field 'params.seed': YAML read 16:9 as the base-60 number 969; "
        'write it in quotes to keep it as text ("16:9")',
        "field 'defaults.params.seed': YAML read 1:30 as the base-60 number 90; write it in "
        'quotes to keep it as text ("1:30")',
        "job 2 (key 'c'): field 'params.seed': YAML read 1:30.5 as the base-60 number 90.5; "
        'write it in quotes to keep it as text ("1:30.5")',
    ]


def test_quoted_and_other_numbers_are_read_as_before(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(
        HEAD + "jobs:\n"
        '  - {key: a, prompt: x, params: {seed: "16:9"}}\n'
        "  - {key: b, prompt: x, params: {seed: 1_000}}\n"
        "  - {key: c, prompt: x, params: {seed: 2.5}}\n"
    )
    jobs = {job.key: job for job in load_manifest(path).jobs}
    assert jobs["a"].params == {"seed": "16:9"}
    assert jobs["b"].params == {"seed": 1000}
    assert jobs["c"].params == {"seed": 2.5}
